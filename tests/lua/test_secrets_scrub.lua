-- kb.secrets' scrubber, the one every writer uses (docs/security.md):
-- registered secrets and the pattern rules in text, field by field in
-- tables (credential-named fields, protected fields), JSON that stays
-- valid, parameter declarations, and kb.log lines.
local T = require "kb.testing"
local kb = require "kb"
local secrets = require "kb.secrets"
local json = require "kb.json"
local u = require "kb.k8s.util"

T.case("scrub: registered secrets (plain, base64, JSON-escaped), then the pattern rules", function()
  local s = "Zq9registeredSecretQ"
  secrets.register(s)
  T.eq(secrets.scrub("echo " .. s .. " end"), "echo <redacted> end")
  T.eq(secrets.scrub("b64 " .. u.b64encode(s)), "b64 <redacted>=", "the padding alone is left")
  -- inside a longer base64 text, at another alignment
  local inner = u.b64encode("xy" .. s .. "tail")
  T.ok(not secrets.scrub(inner):find(u.b64encode(s):sub(1, 8), 1, true))
  T.eq(secrets.scrub(inner):find("<redacted>", 1, true) ~= nil, true, "found at offset 2")
  local quoted = 'pw"with\\quote' .. s
  secrets.register(quoted)
  T.eq(secrets.scrub(json.encode({ v = quoted })), '{"v":"<redacted>"}')
  -- the patterns
  T.eq(secrets.scrub("GET http://bob:pw@h:1/x?access_token=a&X-Amz-Signature=b&page=2"),
    "GET http://***@h:1/x?access_token=[REDACTED]&X-Amz-Signature=[REDACTED]&page=2")
  T.eq(secrets.scrub("max_tokens=5 key=name"), "max_tokens=5 key=name")
  -- a secret registered after a text was scrubbed once is replaced the next time
  local later = "LaterRegisteredQ7"
  T.eq(secrets.scrub("x " .. later), "x " .. later)
  secrets.register(later)
  T.eq(secrets.scrub("x " .. later), "x <redacted>")
end)

-- The registered texts replaced as the Lua rules had it (each in list
-- order, every occurrence left to right): what log.replace_secrets must
-- give; then the pattern rules: what the C scrubber (log.redact with a
-- list; kb.csv's cells) must give.
local function reference_replace(text, list)
  for _, secret in ipairs(list) do
    local at, out = 1, {}
    while true do
      local a, b = text:find(secret, at, true)
      if not a then break end
      out[#out + 1] = text:sub(at, a - 1) .. "<redacted>"
      at = b + 1
    end
    out[#out + 1] = text:sub(at)
    text = table.concat(out)
  end
  return text
end
local function reference_scrub(text, list)
  return require("kb.log").redact(reference_replace(text, list))
end

T.case("scrub in C: every occurrence of each registered text in list order, then the patterns", function()
  local log = require "kb.log"
  local csv = require "kb.csv"
  local list = { "abcdabcd", "abcd", "cdab", "x%.y" } -- longest first, as kb.secrets keeps them
  local pieces = { "abcd", "ab", "cd", "x%.y", "token=", "q", " ", ",", "abcdabcd", "dab" }
  local state = 99
  local function rand(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n + 1
  end
  for _ = 1, 2000 do
    local parts = {}
    for k = 1, rand(8) do parts[k] = pieces[rand(#pieces)] end
    local text = table.concat(parts)
    T.eq(log.redact(text, list), reference_scrub(text, list), string.format("%q", text))
    -- the logger's half: only the texts (the patterns come in the logger)
    T.eq(log.replace_secrets(text, list), reference_replace(text, list), string.format("%q", text))
  end
  T.eq(log.replace_secrets("token=abcd x", list), "token=<redacted> x", "no pattern rule applied")
  T.eq(log.replace_secrets("password=hunter22", {}), "password=hunter22")
  -- the live register is what scrub and kb.csv's cells use
  local s = "CsvCellSecret9Q"
  secrets.register(s)
  T.eq(csv.encode_row({ "a " .. s .. " b", 1 }), "a <redacted> b,1")
  T.eq(secrets.scrub(s .. s), "<redacted><redacted>")
  T.eq(log.redact("plain text", secrets.register_list()), "plain text")
end)

T.case("scrub_value: strings, credential-named fields, protected fields; the original untouched", function()
  local p = { api_key = "short", url = "https://u:p@h/x?sig=abc", n = 3, password = "pw1", empty = "" }
  secrets.protect(p, { "api_key" })
  local doc = { params = p, list = json.array({}), metrics = { { key = "run.create", token = "tk" } } }
  local out = secrets.scrub_value(doc)
  T.same(out.params, { api_key = "<redacted>", url = "https://***@h/x?sig=[REDACTED]", n = 3,
    password = "[REDACTED]", empty = "" })
  T.eq(out.metrics[1].key, "run.create", "a field named key is not a credential")
  T.eq(out.metrics[1].token, "[REDACTED]")
  T.eq(json.encode(out.list), "[]", "array marks kept")
  T.eq(p.api_key, "short", "the scenario still has its value")
  T.eq(p.url, "https://u:p@h/x?sig=abc")
end)

T.case("encode_json: valid JSON even where a header rule would run to the end of the line", function()
  local v = { msg = "sent Cookie: abc, and more", x = 1, nested = { "Authorization: Bearer abcdefgh123" } }
  for _, opts in ipairs({ {}, { pretty = true } }) do
    local text = secrets.encode_json(v, opts)
    local back = json.decode(text)
    T.eq(back.x, 1)
    T.eq(back.msg, "sent Cookie: [REDACTED]")
    T.eq(back.nested[1], "Authorization: [REDACTED]")
  end
  -- nothing to scrub: the plain encoding
  T.eq(secrets.encode_json({ a = 1, b = "run.create" }), json.encode({ a = 1, b = "run.create" }))
end)

T.case("encode_json: flat records, their keys judged once, judged again after a registration", function()
  -- a flat record: each key is judged once, then remembered
  T.eq(secrets.encode_json({ op = "run.get", latency = 0.5, status = 200 }),
    '{"latency":0.5,"op":"run.get","status":200}')
  -- a credential-named key: its value decides, every time
  T.eq(secrets.encode_json({ token = "" }), '{"token":""}')
  T.eq(secrets.encode_json({ token = "abcd1234" }), '{"token":"[REDACTED]"}')
  T.eq(secrets.encode_json({ token = "" }), '{"token":""}')
  -- a key that became a secret after it was judged clean is scrubbed
  local key = "Kq7laterSecretKey"
  T.eq(secrets.encode_json({ [key] = 1 }), '{"' .. key .. '":1}')
  secrets.register(key)
  T.eq(secrets.encode_json({ [key] = 1 }):find(key, 1, true), nil)
end)

T.case("params: declarations {default, secret}", function()
  local plain, names = secrets.params({ a = 1, k = { default = "", secret = true }, t = { default = 2 } })
  T.same(plain, { a = 1, k = "", t = 2 })
  T.same(names, { "k" })
  local same, none = secrets.params({ a = 1 })
  T.same(same, { a = 1 })
  T.eq(none, nil)
  T.raises(function() secrets.params({ k = { default = "", secrte = true } }) end,
    "parameter 'k': a declaration table takes default and secret, not 'secrte'")
  -- through kb.params: the merged value is protected and registered
  local merged = require("kb.params").merge({ k = { default = "", secret = true }, n = 1 }, nil,
    { k = "MergedSecretQ9" })
  T.eq(merged.k, "MergedSecretQ9")
  T.eq(json.decode(secrets.encode_json({ params = merged })).params.k, "<redacted>")
  T.eq(secrets.scrub("x MergedSecretQ9"), "x <redacted>")
  -- --help shows the default and marks it
  local help = require("kb.cli.scenario_help").text("none.lua", { params = { k = { default = "", secret = true } } })
  T.contains(help, 'k = ""  string   (secret: never written)')
end)

T.case("kb.log lines replace registered secrets; bad arguments still raise", function()
  T.raises(function() kb.log.warn({}, 1) end, "bad argument #1 to 'kb.log.warn' (string expected, got table)")
  T.raises(function() kb.log.info() end, "bad argument #1 to 'kb.log.info' (value expected)")
  local dir = kb.fs.tmpdir("kb-secrets-log")
  local script = kb.fs.join(dir, "log.lua")
  kb.fs.write(script, 'local s = require "kb.secrets"; s.register("LoggedSecretQ5"); '
    .. 'require("kb.log").warn("it is %s", "LoggedSecretQ5")\n')
  local r = kb.process.run { cmd = { os.getenv("KBRUN_BIN"), "-q", "-o", dir, script }, timeout = 60 }
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stderr, "WARN it is <redacted>")
  T.ok(not r.stderr:find("LoggedSecretQ5", 1, true), r.stderr)
  kb.fs.remove(dir, { recursive = true })
end)

T.run()
