--- The embedded simulator is not a file server either (kb.sim.start's
-- pipeline_dir, on the fast-forwarding clock, in the scenario's loop):
-- local pipeline files only from inside that folder, one refusal text for
-- a file that exists outside and one that does not, and http:// pipeline
-- URLs fetched from a loopback kb.httpd server on the same loop.
local kb = require "kb"
local core = require "kb.core"
local T = require "kb.testing"
local fs = kb.fs

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local HELLO = fs.read(SRC .. "/specs/kfp/pipelines/v2ir_hello_world.yaml")
local REFUSED = "cannot read the pipeline spec from that path: this simulator reads local "
  .. "pipeline files only from inside the folder it was given (kbrun sim --pipeline-dir DIR), "
  .. "and that path names no readable pipeline file there; serve the file over http(s) or "
  .. "upload it"

local tmp = fs.abspath(fs.join(os.getenv("KBRUN_TEST_OUT") or "/tmp", "sim-pipeline-dir"))
fs.mkdir(fs.join(tmp, "in"), { parents = true })
fs.mkdir(fs.join(tmp, "out"), { parents = true })
fs.write(fs.join(tmp, "in", "hello.yaml"), HELLO)
fs.write(fs.join(tmp, "out", "secret.yaml"), HELLO)

local function create(sim, name, url)
  local res = kb.http.request { method = "POST", url = sim.url .. "/apis/v1beta1/pipelines",
    headers = { ["content-type"] = "application/json" },
    body = kb.json.encode { name = name, url = { pipeline_url = url } } }
  return res.status, kb.json.decode(res.body)
end

T.case("local paths: inside the folder only, one refusal for everything else", function()
  local sim <close> = kb.sim.start { profile = "fast", pipeline_dir = fs.join(tmp, "in") }
  T.eq(core.clock_kind(), "events")
  local st, b = create(sim, "inside", fs.join(tmp, "in", "hello.yaml"))
  T.eq(st, 200, "a file inside: " .. kb.json.encode(b))
  T.eq(b.name, "inside")
  st, b = create(sim, "relative", "hello.yaml")
  T.eq(st, 200, "relative to the folder")
  local texts = {}
  for i, url in ipairs { "/etc/passwd", "/nonexistent/p.yaml", "../out/secret.yaml",
    "file://" .. fs.join(tmp, "out", "secret.yaml") } do
    st, b = create(sim, "refused-" .. i, url)
    T.eq(st, 400, url)
    T.eq(b.code, 3, url)
    T.eq(b.details[1].message, REFUSED, url)
    texts[#texts + 1] = b.message
  end
  for i = 2, #texts do T.eq(texts[i], texts[1], "the same text, whatever the path") end
end)

T.case("without pipeline_dir nothing local is read", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  local st, b = create(sim, "none", fs.join(tmp, "in", "hello.yaml"))
  T.eq(st, 400)
  T.eq(b.details[1].message, REFUSED)
end)

T.case("an http:// pipeline URL is fetched, on the same loop", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  local srv <close> = kb.httpd.listen { handler = function(req)
    if req.path == "/p.yaml" then return 200, HELLO, { ["Content-Type"] = "application/yaml" } end
    return 404, "no\n"
  end }
  local st, b = create(sim, "web", srv.url .. "/p.yaml")
  T.eq(st, 200, "fetched: " .. kb.json.encode(b))
  T.eq(b.name, "web")
  local res = kb.http.get(sim.url .. "/apis/v1beta1/pipelines/" .. b.id .. "/templates")
  T.eq(res.status, 200)
  T.contains(kb.json.decode(res.body).template, "name: echo")
  T.eq(srv.requests, 1, "one download")
  st, b = create(sim, "web404", srv.url .. "/missing.yaml")
  T.eq(st, 400)
  T.eq(b.details[1].message, "error fetching pipeline spec from " .. srv.url
    .. "/missing.yaml - the server answered HTTP 404")
end)

T.run()
