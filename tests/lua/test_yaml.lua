-- kb.yaml (src/lua/yaml.c over src/codec/yaml*.c and src/lua/cjson_conv.c):
-- core schema typing, tags, anchors and merge keys, documents, limits,
-- error objects and messages, encoding and round trips.
local T = require "kb.testing"
local yaml = require "kb.yaml"

local null = yaml.null
local array_mt = getmetatable(yaml.array())

local function is_array(t) return getmetatable(t) == array_mt end

-- Runs fn, which must raise a kb "yaml" error; returns the error object.
local function yaml_error(fn, ...)
  local ok, err = pcall(fn, ...)
  T.ok(not ok, "expected an error")
  T.eq(type(err), "table", "error is a kb error object")
  T.eq(err.class, "yaml")
  return err
end

T.case("plain scalars follow the YAML 1.2 core schema", function()
  local cases = {
    { "~", null }, { "null", null }, { "Null", null }, { "NULL", null },
    { "true", true }, { "True", true }, { "TRUE", true },
    { "false", false }, { "False", false }, { "FALSE", false },
    { "yes", "yes" }, { "no", "no" }, { "on", "on" }, { "off", "off" }, { "y", "y" },
    { "nULL", "nULL" }, { "tRUE", "tRUE" },
    { "0", 0 }, { "42", 42 }, { "-17", -17 }, { "+5", 5 }, { "007", 7 },
    { "0o17", 15 }, { "0x1F", 31 }, { "0xff", 255 },
    { "0X1F", "0X1F" }, { "0o8", "0o8" }, { "1_000", "1_000" }, { "-0x1", "-0x1" },
    { "1.5", 1.5 }, { "-2.5e3", -2500 }, { ".5", 0.5 }, { "1e3", 1000 },
    { "1e", "1e" }, { "inf", "inf" }, { "1.2.3", "1.2.3" },
    { "'true'", "true" }, { '"123"', "123" }, { "'~'", "~" }, { '""', "" },
    { "2001-12-14", "2001-12-14" },
  }
  for _, c in ipairs(cases) do
    T.eq(yaml.decode(c[1]), c[2], c[1])
  end
  T.eq(yaml.decode("v:").v, null, "empty value")
  T.eq(yaml.decode(""), null, "empty stream")
  T.eq(yaml.decode("|\n  123\n"), "123\n", "block scalars are strings")
end)

T.case("integers and floats keep their Lua number types", function()
  local v = yaml.decode("[1, 1.5, 1e3, 1.0, 0x10]")
  T.eq(math.type(v[1]), "integer")
  T.eq(math.type(v[2]), "float")
  -- cJSON keeps one double: integral values come back as integers.
  T.eq(math.type(v[3]), "integer")
  T.eq(math.type(v[4]), "integer")
  T.eq(v[5], 16)
  local inf = yaml.decode("[.inf, -.Inf, +.INF, .nan, .NaN]")
  T.eq(inf[1], math.huge)
  T.eq(inf[2], -math.huge)
  T.eq(inf[3], math.huge)
  T.ok(inf[4] ~= inf[4], ".nan")
  T.ok(inf[5] ~= inf[5], ".NaN")
end)

T.case("integers beyond 2^53 stay exact", function()
  T.eq(yaml.decode("9007199254740993"), 9007199254740993)
  T.eq(math.type(yaml.decode("9007199254740993")), "integer")
  T.eq(yaml.decode("-9007199254740993"), -9007199254740993)
  T.eq(yaml.decode("9223372036854775807"), math.maxinteger)
  T.eq(yaml.decode("-9223372036854775808"), math.mininteger)
  T.eq(yaml.decode("0x7FFFFFFFFFFFFFFF"), math.maxinteger)
  -- Beyond int64 Lua has only floats.
  T.eq(math.type(yaml.decode("99999999999999999999")), "float")
  T.eq(yaml.decode("99999999999999999999"), 1e20)
  -- And back out exactly.
  T.eq(yaml.encode(9007199254740993), "9007199254740993\n")
  T.eq(yaml.encode({ big = math.maxinteger }), "big: 9223372036854775807\n")
  T.eq(yaml.decode(yaml.encode(math.mininteger)), math.mininteger)
end)

T.case("explicit tags", function()
  T.eq(yaml.decode("!!str 123"), "123")
  T.eq(yaml.decode("!!int '42'"), 42)
  T.eq(yaml.decode("!!float 3"), 3)
  T.eq(yaml.decode("!!bool 'true'"), true)
  T.eq(yaml.decode("!!null ''"), null)
  T.same(yaml.decode("!!map {a: 1}"), { a = 1 })
  T.same(yaml.decode("!!seq [1]"), { 1 })
  T.eq(yaml.decode("!Ref 12"), "12", "unknown tags keep the scalar as a string")
  T.eq(yaml.decode("!!timestamp 2001-12-14"), "2001-12-14")
  local err = yaml_error(yaml.decode, "a: !!int abc")
  T.eq(err.message, 'kb.yaml.decode: invalid !!int value "abc" at line 1, column 4')
  err = yaml_error(yaml.decode, "!!map [1]")
  T.eq(err.message, "kb.yaml.decode: !!map tag on a sequence at line 1, column 1")
end)

T.case("sequences are marked arrays, mappings plain tables, null the sentinel", function()
  local doc = yaml.decode("list: [1, ~]\nempty: []\nmap: {}\nnested: [[]]")
  T.ok(is_array(doc.list))
  T.ok(is_array(doc.empty))
  T.ok(is_array(doc.nested[1]))
  T.eq(getmetatable(doc.map), nil)
  T.eq(getmetatable(doc), nil)
  T.eq(doc.list[2], null)
  T.eq(#doc.list, 2)
  T.eq(yaml.null, null)
end)

T.case("anchors, aliases and merge keys", function()
  local doc = yaml.decode [[
base: &base
  image: busybox
  pull: IfNotPresent
  limits: {cpu: 1}
train:
  <<: *base
  image: trainer
list: [&x hi, *x]
multi:
  x: 0
  <<: [{x: 1, y: 1}, {y: 2, z: 2}]
]]
  T.same(doc.train, { image = "trainer", pull = "IfNotPresent", limits = { cpu = 1 } })
  T.same(doc.list, { "hi", "hi" })
  T.same(doc.multi, { x = 0, y = 1, z = 2 })
  -- Aliases are copies.
  T.ok(doc.train.limits ~= doc.base.limits)
  T.same(yaml.decode('"<<": 1'), { ["<<"] = 1 })
  local err = yaml_error(yaml.decode, "a: 1\nb: *nope")
  T.eq(err.message, "kb.yaml.decode: undefined alias *nope at line 2, column 4")
  err = yaml_error(yaml.decode, "a:\n  <<: 3")
  T.eq(err.message, "kb.yaml.decode: the value of a merge key (<<) must be a mapping or a "
    .. "sequence of mappings at line 2, column 3")
  err = yaml_error(yaml.decode, "&a [1, *a]")
  T.eq(err.message, "kb.yaml.decode: alias *a refers to a node that contains it "
    .. "(recursive alias) at line 1, column 8")
end)

T.case("multi-document streams", function()
  local text = "a: 1\n---\n- x\n---\n"
  local docs = yaml.decode_all(text)
  T.ok(is_array(docs))
  T.eq(#docs, 3)
  T.same(docs[1], { a = 1 })
  T.same(docs[2], { "x" })
  T.eq(docs[3], null)
  local none = yaml.decode_all("")
  T.ok(is_array(none))
  T.eq(#none, 0)
  local err = yaml_error(yaml.decode, text)
  T.eq(err.message, "kb.yaml.decode: more than one document in the stream "
    .. "(use kb.yaml.decode_all) at line 2, column 1")
  T.eq(err.line, 2)
  T.eq(err.column, 1)
  T.same(yaml.decode("--- {a: 1}\n...\n"), { a = 1 })
end)

T.case("syntax errors carry line and column", function()
  local text = "image: x\nport: 1\nname: a: b\n"
  local err = yaml_error(yaml.decode, text)
  T.eq(err.message,
    "kb.yaml.decode: mapping values are not allowed in this context at line 3, column 8")
  T.eq(tostring(err),
    "yaml: kb.yaml.decode: mapping values are not allowed in this context at line 3, column 8")
  T.eq(err.line, 3)
  T.eq(err.column, 8)
  T.eq(err.name, nil)

  err = yaml_error(yaml.decode, text, { name = "params.yaml" })
  T.eq(err.message, "params.yaml:3:8: mapping values are not allowed in this context")
  T.eq(err.name, "params.yaml")
  T.eq(err.line, 3)

  err = yaml_error(yaml.decode_all, "a: [1, 2\n")
  T.eq(err.message, "kb.yaml.decode_all: did not find expected ',' or ']' at line 2, column 1")
  err = yaml_error(yaml.decode, "a:\n\tb: 1\n")
  T.eq(err.message,
    "kb.yaml.decode: found character that cannot start any token at line 2, column 1")
  err = yaml_error(yaml.decode, "a: \"abc\n", { name = "q.yaml" })
  T.eq(err.message, "q.yaml:2:1: found unexpected end of stream")
  err = yaml_error(yaml.decode, "a: \255\n")
  T.eq(err.message, "kb.yaml.decode: invalid leading UTF-8 octet #FF at line 1, column 4")
end)

T.case("duplicate keys are errors with a position", function()
  local err = yaml_error(yaml.decode, "a: 1\nb: 2\na: 3\n")
  T.eq(err.message, 'kb.yaml.decode: duplicate key "a" in mapping at line 3, column 1')
  err = yaml_error(yaml.decode, "spec:\n  x: {k: 1, k: 2}\n", { name = "job.yaml" })
  T.eq(err.message, 'job.yaml:2:13: duplicate key "k" in mapping')
  err = yaml_error(yaml.decode, "? [a]\n: 1\n")
  T.eq(err.message,
    "kb.yaml.decode: mapping keys must be scalars (a sequence cannot be a key) at line 1, column 3")
end)

T.case("alias bombs and deep nesting are refused", function()
  local lines = { "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]" }
  local prev = "a"
  for c in ("bcdefghi"):gmatch(".") do
    lines[#lines + 1] = string.format("%s: &%s [%s]", c, c,
      string.rep("*" .. prev, 9, ", "))
    prev = c
  end
  local bomb = table.concat(lines, "\n")
  local err = yaml_error(yaml.decode, bomb)
  T.eq(err.message,
    "kb.yaml.decode: aliases expand to more than 1000000 nodes (alias bomb?) at line 7, column 8")
  err = yaml_error(yaml.decode, "a: &a [1, 2]\nb: [*a, *a]", { max_alias_nodes = 5 })
  T.eq(err.message,
    "kb.yaml.decode: aliases expand to more than 5 nodes (alias bomb?) at line 2, column 9")
  T.same(yaml.decode("a: &a [1, 2]\nb: [*a]", { max_alias_nodes = 5 }).b, { { 1, 2 } })

  local deep = string.rep("[", 513) .. string.rep("]", 513)
  err = yaml_error(yaml.decode, deep)
  T.eq(err.message, "kb.yaml.decode: nesting deeper than 512 levels at line 1, column 513")
  local ok = string.rep("[", 512) .. string.rep("]", 512)
  T.ok(yaml.decode(ok))
  err = yaml_error(yaml.decode, "a: {b: {c: 1}}", { max_depth = 2 })
  T.eq(err.message, "kb.yaml.decode: nesting deeper than 2 levels at line 1, column 8")
end)

T.case("bad arguments and options", function()
  T.raises(yaml.decode, "string expected", nil)
  T.raises(yaml.decode, "table expected", "a: 1", 5)
  T.raises(yaml.decode, "option 'name' must be a string", "a: 1", { name = 5 })
  T.raises(yaml.decode, "max_depth must be in 1..4096", "a: 1", { max_depth = 0 })
  T.raises(yaml.decode, "max_depth must be in 1..4096", "a: 1", { max_depth = 5000 })
  T.raises(yaml.decode, "max_alias_nodes must be positive", "a: 1", { max_alias_nodes = -1 })
  T.raises(yaml.encode_all, "table expected", "x")
  T.raises(yaml.encode_all, "expected a list of documents", { a = 1 })
end)

T.case("encode: block style, sorted keys, 2-space indent", function()
  local text = yaml.encode {
    kind = "Job",
    metadata = { name = "bench", labels = { app = "kb" } },
    spec = { args = { "--n", 3 }, empty = yaml.array(), none = {}, ratio = 0.25, ok = true,
      missing = null },
  }
  T.eq(text, table.concat({
    "kind: Job",
    "metadata:",
    "  labels:",
    "    app: kb",
    "  name: bench",
    "spec:",
    "  args:",
    "  - --n",
    "  - 3",
    "  empty: []",
    "  missing: null",
    "  none: {}",
    "  ok: true",
    "  ratio: 0.25",
    "",
  }, "\n"))
  T.eq(yaml.encode("plain"), "plain\n")
  T.eq(yaml.encode(nil), "null\n")
  T.eq(yaml.encode({ 1, 2 }), "- 1\n- 2\n")
  T.eq(yaml.encode({ [404] = "nf" }), '"404": nf\n')
  T.eq(yaml.encode({ x = math.huge, y = -math.huge }), "x: .inf\n\"y\": -.inf\n")
end)

T.case("documents pass between kb.yaml and kb.json", function()
  local json = require "kb.json"
  T.eq(json.null, yaml.null)
  T.eq(json.encode(yaml.decode("a: []\nb: {}\nc: [~, 1.5, 9007199254740993]")),
    '{"a":[],"b":{},"c":[null,1.5,9007199254740993]}')
  T.same(yaml.decode(yaml.encode(json.decode('{"a":[],"n":null,"x":{"y":[1,{}]}}'))),
    json.decode('{"a":[],"n":null,"x":{"y":[1,{}]}}'))
  T.eq(yaml.encode({ list = json.array(), obj = json.object({ "a", "b" }) }),
    'list: []\nobj:\n  "1": a\n  "2": b\n')
end)

T.case("encode quotes strings that would change type", function()
  local retyping = { "true", "False", "null", "~", "", "123", "-7", "0x1F", "1.5", "1e3",
    ".inf", "yes", "no", "on", "off", "y", "n", "<<", "2.1.0", "12:30" }
  for _, s in ipairs(retyping) do
    T.eq(yaml.encode({ k = s }), 'k: "' .. s .. '"\n', s)
    T.eq(yaml.decode(yaml.encode({ k = s })).k, s, s)
  end
  local awkward = { " lead", "trail ", "a: b", "a:", "#x", "x #y", "- x", "-", "[a]", "*x",
    "&x", "!x", "|x", "'q'", '"d"', "tab\there", "\xc3\xa9t\xc3\xa9", "cr\rhere" }
  for _, s in ipairs(awkward) do
    T.eq(yaml.decode(yaml.encode({ [s] = s }))[s], s, s)
  end
  T.eq(yaml.encode({ s = " x" }), "s: ' x'\n")
end)

T.case("encode writes multi-line strings as literal blocks", function()
  T.eq(yaml.encode({ script = "set -e\necho hi\n" }), "script: |\n  set -e\n  echo hi\n")
  T.eq(yaml.encode({ s = "a\nb" }), "s: |-\n  a\n  b\n")
  for _, s in ipairs({ "a\n\n", "\n", "  indented\nx\n", "x\n ", "trailing \nspace" }) do
    T.eq(yaml.decode(yaml.encode({ s = s })).s, s, string.format("%q", s))
  end
end)

T.case("encode errors name the place, in kb.json's words", function()
  local err = yaml_error(yaml.encode, { spec = { args = { "a", print } } })
  T.eq(err.message, "kb.yaml.encode: cannot encode a function at $.spec.args[2]")
  T.eq(err.path, "$.spec.args[2]")
  local t = { k = {} }
  t.k.back = t
  err = yaml_error(yaml.encode, t)
  T.eq(err.message, "kb.yaml.encode: cycle detected (a table contains itself) at $.k.back")
  err = yaml_error(yaml.encode, { a = { 1, 2, x = 3 } })
  T.eq(err.message, "kb.yaml.encode: table mixes integer and string keys at $.a.x")
  err = yaml_error(yaml.encode, { name = "bad \255" })
  T.eq(err.message, "kb.yaml.encode: invalid UTF-8 in string (byte 5) at $.name")
  err = yaml_error(yaml.encode_all, { { ok = 1 }, { f = print } })
  T.eq(err.message, "kb.yaml.encode_all: cannot encode a function at $[2].f")
  -- an odd key: quotes, a backslash and a control escaped, a byte that is
  -- not UTF-8 as \xNN, cut at 48 bytes; the same step as kb.json's
  local odd = 'a"b\\c\1' .. ("x"):rep(50)
  local step = '["a\\"b\\\\c\\x01' .. ("x"):rep(42) .. '..."]'
  err = yaml_error(yaml.encode, { [odd] = { f = print } })
  T.eq(err.path, "$" .. step .. ".f")
  local ok, jerr = pcall(require("kb.json").encode, { [odd] = { f = print } })
  T.eq(ok, false)
  T.eq(jerr.message, "kb.json.encode: cannot encode a function at $" .. step .. ".f")
  err = yaml_error(yaml.encode, { ["k\255"] = 1 })
  T.eq(err.message, 'kb.yaml.encode: invalid UTF-8 in a key (byte 2) at $["k\\xff"]')
end)

T.case("encode_all and decode_all round trip", function()
  local docs = {
    { apiVersion = "v1", kind = "ConfigMap", data = { ["params.yaml"] = "batch: 32\n" } },
    { 1, 2 },
    "s",
    null,
  }
  local text = yaml.encode_all(docs)
  T.eq(text, table.concat({
    "---",
    "apiVersion: v1",
    "data:",
    "  params.yaml: |",
    "    batch: 32",
    "kind: ConfigMap",
    "---",
    "- 1",
    "- 2",
    "--- s",
    "--- null",
    "",
  }, "\n"))
  T.same(yaml.decode_all(text), docs)
  T.eq(yaml.encode_all({}), "")
  T.eq(yaml.encode_all(yaml.array()), "")
end)

T.case("a Kubernetes manifest survives decode -> encode -> decode", function()
  local manifest = [[
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: tf-cnn
  labels: &labels {app: kubebench, tier: "1"}
  annotations:
    note: 'colons: here, # and hashes'
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        metadata: {labels: *labels}
        spec:
          nodeSelector: {cloud.google.com/gke-nodepool: gpu-pool}
          containers:
          - &c
            name: tensorflow
            image: gcr.io/kubeflow/tf-benchmarks:v1
            args: [--model=resnet50, --batch_size=32]
            env:
            - {name: RATE, value: "1.5"}
            - {name: ON, value: "on"}
            resources:
              limits: {nvidia.com/gpu: 1, cpu: 4, memory: 16Gi}
          - <<: *c
            name: sidecar
            args: []
          tolerations: ~
          terminationGracePeriodSeconds: 9007199254740993
]]
  local doc = yaml.decode(manifest)
  local spec = doc.spec.tfReplicaSpecs.Worker.template.spec
  T.eq(spec.containers[2].image, "gcr.io/kubeflow/tf-benchmarks:v1")
  T.ok(is_array(spec.containers[2].args))
  T.eq(#spec.containers[2].args, 0)
  T.eq(spec.tolerations, null)
  T.eq(spec.terminationGracePeriodSeconds, 9007199254740993)
  T.eq(doc.metadata.labels.tier, "1")
  local text = yaml.encode(doc)
  local back = yaml.decode(text)
  T.same(back, doc)
  T.ok(is_array(back.spec.tfReplicaSpecs.Worker.template.spec.containers[2].args))
  T.eq(yaml.encode(back), text, "deterministic output")
  T.contains(text, '      value: "on"\n')
  T.contains(text, '      value: "1.5"\n')
end)

T.case("the carried KFP and Kubebench specs decode", function()
  local src = os.getenv("KBRUN_SOURCE_DIR") or ".."
  local specs = src .. "/specs"
  local p = io.popen('find "' .. specs .. '/kfp/pipelines" "' .. specs
    .. '/kubebench" -name "*.yaml" | sort')
  local files = {}
  for line in p:lines() do files[#files + 1] = line end
  p:close()
  T.ok(#files >= 22, "found " .. #files .. " spec files")
  for _, path in ipairs(files) do
    local f = assert(io.open(path, "rb"))
    local text = f:read("a")
    f:close()
    local docs = yaml.decode_all(text, { name = path })
    T.ok(#docs >= 1, path)
    T.same(yaml.decode_all(yaml.encode_all(docs)), docs, path)
  end
end)

T.run()
