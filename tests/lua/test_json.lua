-- kb.json: encode/decode, null and array conventions, exact integers, errors.
local T = require "kb.testing"
local kb = require "kb"
local json = require "kb.json"

-- Returns the error object fn(...) raises (asserting it is a json kb error).
local function json_error(fn, ...)
  local ok, err = pcall(fn, ...)
  T.ok(not ok, "expected an error")
  T.eq(type(err), "table", "error object")
  T.eq(err.class, "json", "error class")
  return err
end

T.case("module is reachable as kb.json", function()
  T.eq(kb.json, json)
  T.eq(type(json.encode), "function")
  T.eq(type(json.decode), "function")
end)

T.case("null sentinel", function()
  T.eq(type(json.null), "userdata")
  T.eq(json.decode("null"), json.null)
  local t = json.decode('[null, {"a": null}]')
  T.eq(t[1], json.null)
  T.eq(t[2].a, json.null)
  T.eq(#t, 2)
  T.eq(json.encode(json.null), "null")
  T.eq(json.encode({ a = json.null }), '{"a":null}')
  T.eq(json.encode({ 1, json.null, 3 }), "[1,null,3]")
  T.eq(json.encode(nil), "null")
end)

T.case("scalars", function()
  T.eq(json.decode("true"), true)
  T.eq(json.decode(" false "), false)
  T.eq(json.decode('"hi"'), "hi")
  T.eq(json.encode(true), "true")
  T.eq(json.encode("hi"), '"hi"')
  T.eq(json.encode(42), "42")
  T.eq(json.encode(-1.5), "-1.5")
end)

T.case("empty array and empty object round trip", function()
  local arr, obj = json.decode("[]"), json.decode("{}")
  T.eq(json.encode(arr), "[]")
  T.eq(json.encode(obj), "{}")
  T.eq(getmetatable(arr), getmetatable(json.array()))
  T.eq(getmetatable(obj), nil)
  T.eq(json.encode({}), "{}")
  T.eq(json.encode(json.array()), "[]")
  local t = {}
  T.eq(json.array(t), t)
  T.eq(json.encode(t), "[]")
  T.eq(json.encode(json.decode('{"a":[],"b":{},"c":[[],{}]}')), '{"a":[],"b":{},"c":[[],{}]}')
  -- Marking twice or switching marks is allowed; foreign metatables are not.
  T.eq(json.encode(json.object(json.array())), "{}")
  T.raises(json.array, "table already has a metatable", setmetatable({}, {}))
  T.raises(json.array, "bad argument #1", 5)
end)

T.case("arrays and objects", function()
  T.eq(json.encode({ 1, 2, 3 }), "[1,2,3]")
  T.eq(json.encode({ "a", { true, false } }), '["a",[true,false]]')
  T.eq(json.encode({ a = 1 }), '{"a":1}')
  -- Integer keys that are not 1..n make an object with string keys,
  -- sorted numerically.
  T.eq(json.encode({ [1] = "x", [3] = "z" }), '{"1":"x","3":"z"}')
  T.eq(json.encode({ [1000] = 1, [200] = 5, [-1] = 0 }), '{"-1":0,"200":5,"1000":1}')
  T.eq(json.encode({ [0] = "zero" }), '{"0":"zero"}')
  T.eq(json.encode(json.object({ "a", "b" })), '{"1":"a","2":"b"}')
  -- A marked array writes holes as null.
  T.eq(json.encode(json.array({ [1] = 1, [3] = 3 })), "[1,null,3]")
  local big = {}
  for i = 1, 1000 do big[i] = i end
  T.eq(#json.decode(json.encode(big)), 1000)
  -- Decoded objects have string keys only.
  local t = json.decode('{"1":"x","a":{"b":[1,{"c":2}]}}')
  T.eq(t["1"], "x")
  T.eq(t[1], nil)
  T.eq(t.a.b[2].c, 2)
  T.eq(json.decode('{"a":1,"a":2}').a, 2)
end)

T.case("large and wide containers decode completely", function()
  -- Members are gathered in chunks; cover the chunk edges.
  for _, n in ipairs({ 63, 64, 65, 127, 128, 129, 1000 }) do
    local parts, keys = {}, {}
    for i = 1, n do
      parts[i] = tostring(i)
      keys[i] = string.format('"k%d":%d', i, i)
    end
    local arr = json.decode("[" .. table.concat(parts, ",") .. "]")
    T.eq(#arr, n, "array length")
    T.eq(arr[1], 1)
    T.eq(arr[n], n)
    T.eq(getmetatable(arr), getmetatable(json.array()))
    local obj = json.decode("{" .. table.concat(keys, ",") .. "}")
    local count = 0
    for k, v in pairs(obj) do
      count = count + 1
      T.eq(k, "k" .. v)
    end
    T.eq(count, n, "object size")
  end
  -- The last duplicate wins even when the two are far apart.
  local keys = { '"dup":"first"' }
  for i = 1, 300 do keys[#keys + 1] = string.format('"k%d":%d', i, i) end
  keys[#keys + 1] = '"dup":"last"'
  T.eq(json.decode("{" .. table.concat(keys, ",") .. "}").dup, "last")
  -- Many empty and nested containers side by side.
  local many = json.decode("[" .. string.rep("[],{},[[1],{\"a\":[]}],", 2000) .. "0]")
  T.eq(#many, 6001)
  T.eq(json.encode(many[1]), "[]")
  T.eq(json.encode(many[2]), "{}")
  T.eq(many[6000][1][1], 1)
  T.eq(json.encode(many[6000][2]), '{"a":[]}')
  -- Wide containers at every level of a deep document.
  local wide = string.rep("[" .. string.rep("1,", 200), 100) .. "0" .. string.rep("]", 100)
  local t = json.decode(wide)
  for _ = 1, 99 do
    T.eq(#t, 201)
    t = t[201]
  end
  T.eq(#t, 201)
  T.eq(t[201], 0)
end)

T.case("integers above 2^53 stay exact", function()
  local n = json.decode("9007199254740993")
  T.eq(math.type(n), "integer")
  T.eq(n, 9007199254740993)
  T.eq(json.decode("[9007199254740993]")[1], 9007199254740993)
  T.eq(json.decode("-9223372036854775808"), math.mininteger)
  T.eq(json.decode("9223372036854775807"), math.maxinteger)
  local u = json.decode("18446744073709551615")
  T.eq(math.type(u), "float")
  T.eq(u, 1.8446744073709552e19)
  T.eq(json.encode(9007199254740993), "9007199254740993")
  T.eq(json.encode(math.mininteger), "-9223372036854775808")
  T.eq(json.encode({ id = math.maxinteger }), '{"id":9223372036854775807}')
  T.eq(math.type(json.decode("-0")), "integer")
  T.eq(math.type(json.decode("1.0")), "float")
  T.eq(json.decode("1e2"), 100.0)
  T.eq(math.type(json.decode("1e2")), "float")
  T.eq(json.decode("1E400"), math.huge)
end)

T.case("floats use the shortest exact representation", function()
  T.eq(json.encode(0.1), "0.1")
  T.eq(json.encode(0.1 + 0.2), "0.30000000000000004")
  T.eq(json.encode(1e300), "1e+300")
  T.eq(json.encode(3.0), "3")
  T.eq(json.encode(-0.0), "-0")
  for _, x in ipairs({ 5e-324, 1 / 3, 2 ^ 60 + 0.0, 123456.789, -2.2250738585072014e-308,
                       1.7976931348623157e308 }) do
    T.eq(json.decode(json.encode(x)), x, tostring(x))
  end
end)

T.case("strings and unicode", function()
  T.eq(json.decode('"caf\\u00e9"'), "café")
  T.eq(json.decode('"\\ud83d\\ude00"'), "\u{1F600}")
  T.eq(json.decode('"a\\u0000b"'), "a\0b")
  T.eq(json.decode('"\\"\\\\\\/\\b\\f\\n\\r\\t"'), "\"\\/\b\f\n\r\t")
  T.eq(json.encode("café \u{1F600}"), '"café \u{1F600}"')
  T.eq(json.encode("a\"b\\\n\t\0\31"), '"a\\"b\\\\\\n\\t\\u0000\\u001f"')
  T.eq(json.encode({ ["k\n"] = "v" }), '{"k\\n":"v"}')
  local s = ""
  for i = 0, 127 do s = s .. string.char(i) end
  T.eq(json.decode(json.encode(s)), s)
end)

T.case("encode refuses invalid UTF-8", function()
  local err = json_error(json.encode, "ab\xff")
  T.eq(err.message, "kb.json.encode: invalid UTF-8 in string (byte 3) at $")
  err = json_error(json.encode, { list = { "ok", "\xc0\xaf" } })
  T.eq(err.message, "kb.json.encode: invalid UTF-8 in string (byte 1) at $.list[2]")
  T.eq(err.path, "$.list[2]")
  err = json_error(json.encode, { ["k\xff"] = 1 })
  T.eq(err.message, 'kb.json.encode: invalid UTF-8 in key (byte 2) at $["k\\xff"]')
end)

T.case("decode errors carry offset, line and column", function()
  local text = '{"a": 1,\n "b": x}'
  local err = json_error(json.decode, text)
  T.eq(err.message, "kb.json.decode: unexpected character 'x' at byte 16 (line 2, column 7)")
  T.eq(tostring(err), "json: kb.json.decode: unexpected character 'x' at byte 16 (line 2, column 7)")
  T.eq(err.offset, 16)
  T.eq(err.line, 2)
  T.eq(err.column, 7)
  T.eq(text:sub(err.offset, err.offset), "x")

  local cases = {
    { "", "empty document at byte 1 (line 1, column 1)" },
    { "[1,2,]", "trailing comma before ']' at byte 5 (line 1, column 5)" },
    { '{"a":1,}', "trailing comma before '}' at byte 7 (line 1, column 7)" },
    { "[1] x", "unexpected character 'x' after the JSON value at byte 5 (line 1, column 5)" },
    { "01", "leading zeros are not allowed in numbers at byte 1 (line 1, column 1)" },
    { "[1.]", "unexpected character ']', expected a digit after the decimal point at byte 4" },
    { "NaN", "unexpected character 'N' at byte 1" },
    { "// comment\n1", "unexpected character '/' at byte 1" },
    { "{'a':1}", "unexpected character ''', expected a string key at byte 2" },
    { '{"a" 1}', "unexpected character '1', expected ':' after object key at byte 6" },
    { "[1 2]", "unexpected character '2', expected ',' or ']' at byte 4" },
    { "[true, tru]", "invalid literal, expected 'true' at byte 8" },
    { '"abc', "unterminated string at byte 1" },
    { '"a\tb"', "unescaped control character 0x09 in string at byte 3" },
    { '"\\q"', "invalid escape '\\q' in string at byte 2" },
    { '"\\ud800"', "unpaired surrogate \\uD800 in string at byte 2" },
    { '"\\u12"', "invalid \\u escape: expected 4 hex digits at byte 2" },
    { '["ok", "\xff"]', "invalid UTF-8 byte 0xff in string at byte 9" },
    { "[\n  1,\n  2", "unexpected end of input, expected ',' or ']' at byte 11 (line 3, column 4)" },
  }
  for _, c in ipairs(cases) do
    local e = json_error(json.decode, c[1])
    T.eq(e.message:sub(1, 16), "kb.json.decode: ", c[1])
    T.contains(e.message, c[2], c[1])
  end
  T.raises(json.decode, "(string expected, got table)", {})
end)

T.case("decode size limit", function()
  T.same(json.decode("[1,2,3]", { max_size = 7 }), { 1, 2, 3 })
  local err = json_error(json.decode, "[1,2,3]", { max_size = 3 })
  T.eq(err.message, "kb.json.decode: document of 7 bytes exceeds max_size (3)")
end)

T.case("nesting deeper than the limit is refused", function()
  local ok_doc = string.rep("[", 512) .. string.rep("]", 512)
  T.ok(json.decode(ok_doc))
  local err = json_error(json.decode, string.rep("[", 513) .. string.rep("]", 513))
  T.eq(err.message, "kb.json.decode: nesting deeper than 512 levels at byte 513 (line 1, column 513)")
  -- Far deeper documents fail the same way instead of exhausting a stack.
  err = json_error(json.decode, string.rep('{"a":', 100000) .. "1" .. string.rep("}", 100000))
  T.contains(err.message, "nesting deeper than 512 levels at byte 2561")
  err = json_error(json.decode, "[[[1]]]", { max_depth = 2 })
  T.eq(err.message, "kb.json.decode: nesting deeper than 2 levels at byte 3 (line 1, column 3)")
  T.raises(json.decode, "option 'max_depth' must be between 1 and 4096", "1", { max_depth = 0 })
  -- The largest allowed limit works in both directions.
  local deepest = json.decode(string.rep("[", 4096) .. string.rep("]", 4096), { max_depth = 4096 })
  T.eq(#json.encode(deepest, { max_depth = 4096 }), 8192)
  T.raises(json.encode, "nesting deeper than 4095 levels", deepest, { max_depth = 4095 })

  local deep = {}
  local t = deep
  for _ = 1, 600 do
    t[1] = {}
    t = t[1]
  end
  err = json_error(json.encode, deep)
  T.contains(err.message, "kb.json.encode: nesting deeper than 512 levels at $[1][1]")
  T.eq(json.encode({ { { 1 } } }, { max_depth = 3 }), "[[[1]]]")
  err = json_error(json.encode, { a = { b = { 1 } } }, { max_depth = 2 })
  T.eq(err.message, "kb.json.encode: nesting deeper than 2 levels at $.a.b")
end)

T.case("cycles are detected", function()
  local t = { name = "x" }
  t.self = t
  local err = json_error(json.encode, t)
  T.eq(err.message, "kb.json.encode: cycle detected (a table contains itself) at $.self")
  local a = { b = {} }
  a.b.c = { a }
  err = json_error(json.encode, a)
  T.eq(err.message, "kb.json.encode: cycle detected (a table contains itself) at $.b.c[1]")
  -- Shared (acyclic) references are fine.
  local x = { 1 }
  T.eq(json.encode({ x, x }), "[[1],[1]]")
end)

T.case("unencodable values name their path", function()
  local err = json_error(json.encode, { a = { b = { 1, 2, print } } })
  T.eq(err.message, "kb.json.encode: cannot encode a function at $.a.b[3]")
  T.eq(err.path, "$.a.b[3]")
  err = json_error(json.encode, { co = coroutine.create(print) })
  T.eq(err.message, "kb.json.encode: cannot encode a thread at $.co")
  err = json_error(json.encode, { ["a b"] = { f = io.stdout } })
  T.eq(err.message, 'kb.json.encode: cannot encode a userdata at $["a b"].f')
  err = json_error(json.encode, { x = 0 / 0 })
  T.eq(err.message, "kb.json.encode: cannot encode NaN at $.x")
  err = json_error(json.encode, { 1, math.huge })
  T.eq(err.message, "kb.json.encode: cannot encode inf at $[2]")
  err = json_error(json.encode, -math.huge)
  T.eq(err.message, "kb.json.encode: cannot encode -inf at $")
  T.raises(json.encode, "bad argument #1 to")
  T.raises(json.encode, "(value expected)")
end)

T.case("keys JSON cannot express are refused", function()
  local err = json_error(json.encode, { 1, 2, n = 2 })
  T.eq(err.message, "kb.json.encode: table mixes integer and string keys at $.n")
  err = json_error(json.encode, { list = { 1, x = 2 } })
  T.eq(err.message, "kb.json.encode: table mixes integer and string keys at $.list.x")
  err = json_error(json.encode, { [true] = 1 })
  T.eq(err.message, "kb.json.encode: table key is a boolean, not a string or an integer at $[true]")
  err = json_error(json.encode, { a = { [1.5] = 1 } })
  T.eq(err.message, "kb.json.encode: table key is a float, not a string or an integer at $.a[1.5]")
  err = json_error(json.encode, json.array({ 1, x = 1 }))
  T.eq(err.message,
    "kb.json.encode: array (kb.json.array) has a key that is not a positive integer at $.x")
  err = json_error(json.encode, json.array({ [1] = 1, [1000] = 2 }))
  T.eq(err.message,
    "kb.json.encode: array (kb.json.array) is too sparse: 2 elements, largest index 1000 at $")
end)

T.case("pretty printing and key order", function()
  local v = { b = 1, a = { 1, 2 }, c = {}, d = json.array() }
  T.eq(json.encode(v), '{"a":[1,2],"b":1,"c":{},"d":[]}')
  T.eq(json.encode(v, { pretty = true }),
    '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1,\n  "c": {},\n  "d": []\n}')
  T.eq(json.encode({ a = { x = 1 } }, { indent = 4 }), '{\n    "a": {\n        "x": 1\n    }\n}')
  T.eq(json.encode({ a = 1 }, { indent = 0 }), '{\n"a": 1\n}')
  T.eq(json.encode({ a = 1 }, { indent = 4, pretty = false }), '{"a":1}')
  -- Byte order, not locale order.
  T.eq(json.encode({ b = 1, B = 2, a = 3, ["a "] = 4, [""] = 5 }),
    '{"":5,"B":2,"a":3,"a ":4,"b":1}')
  local unsorted = json.encode({ b = 1, a = 2, c = { z = 1, y = 2 } }, { sort_keys = false })
  T.same(json.decode(unsorted), { b = 1, a = 2, c = { z = 1, y = 2 } })
  T.raises(json.encode, "option 'indent' must be between 0 and 16", 1, { indent = 99 })
  T.raises(json.encode, "option 'indent' must be between 0 and 16", 1, { indent = -1 })
  T.raises(json.encode, "option 'indent' must be an integer", 1, { indent = 1.5 })
  T.raises(json.encode, "option 'pretty' must be a boolean", 1, { pretty = 1 })
  T.raises(json.encode, "(table expected, got string)", 1, "x")
end)

T.case("a Kubernetes-like document round trips", function()
  local text = [[
{
  "apiVersion": "v1",
  "kind": "PodList",
  "metadata": {"resourceVersion": "12345", "continue": ""},
  "items": [
    {"metadata": {"name": "step-1", "labels": {"app.kubernetes.io/name": "kfp"},
                  "uid": "c0ffee", "generation": 9007199254740993},
     "spec": {"nodeSelector": {}, "containers": [{"name": "main", "args": [],
              "resources": {"requests": {"cpu": 0.5, "memory": "1Gi"}}}]},
     "status": {"phase": "Running", "startTime": null, "ready": true}}
  ]
}]]
  local doc = json.decode(text)
  T.eq(doc.items[1].metadata.labels["app.kubernetes.io/name"], "kfp")
  T.eq(doc.items[1].metadata.generation, 9007199254740993)
  T.eq(doc.items[1].status.startTime, json.null)
  local again = json.encode(doc)
  T.eq(json.encode(json.decode(again)), again)
  T.contains(again, '"args":[]')
  T.contains(again, '"nodeSelector":{}')
  T.contains(again, '"generation":9007199254740993')
  T.same(json.decode(again), doc)
  T.eq(json.encode(doc, { pretty = true }), json.encode(json.decode(json.encode(doc, { pretty = true })),
    { pretty = true }))
end)

T.case("decode's skip leaves named members out at any depth, and still checks their text", function()
  local text = [[{"run_id": "r1", "state": "RUNNING",
    "pipeline_spec": {"components": {"a": [1, 2, {"deep": [[], {}]}]}, "x": "y"},
    "run_details": [1, "two", null, true, {"pipeline_spec": 3}],
    "state_history": [{"state": "PENDING", "pipeline_spec": {"z": 1}, "update_time": "t"}],
    "tail": 7}]]
  local skip = { pipeline_spec = true, run_details = true }
  local doc = json.decode(text, { skip = skip })
  T.same(doc, { run_id = "r1", state = "RUNNING",
    state_history = { { state = "PENDING", update_time = "t" } }, tail = 7 })
  -- every member but the skipped ones, exactly as a full decode has them
  local full = json.decode(text)
  full.pipeline_spec, full.run_details, full.state_history[1].pipeline_spec = nil, nil, nil
  T.same(doc, full)
  -- a scalar, an empty container and the last member can be skipped
  T.same(json.decode('{"a": 1, "b": {}, "c": [], "d": "x"}', { skip = { a = true, b = true, d = true } }),
    { c = {} })
  T.same(json.decode('[{"a": 1}, {"a": [2]}, {"b": 3}]', { skip = { a = true } }), { {}, {}, { b = 3 } })
  -- a skipped member's text is still parsed: broken JSON there is an error with its place
  local ok, err = pcall(json.decode, '{"a": 1, "pipeline_spec": {"x": [1, 2,]}}', { skip = skip })
  T.eq(ok, false)
  T.contains(err.message, "at byte 38")
  local ok2, err2 = pcall(json.decode, "{}", { skip = "pipeline_spec" })
  T.eq(ok2, false)
  T.contains(tostring(err2), "option 'skip' must be a set of keys")
end)

T.case("a decode inside a decode (a finalizer run by the collector mid-way) decodes on its own", function()
  -- json.decode runs on one shared thread; a __gc that decodes while it
  -- is busy decodes on its caller's stack instead (json_decode.c)
  local inner
  local parts = {}
  for i = 1, 20000 do parts[i] = string.format('{"i":%d,"s":"x%d","a":[1,2,{"b":null}]}', i, i) end
  local text = "[" .. table.concat(parts, ",") .. "]"
  local rounds = 0
  repeat
    rounds = rounds + 1
    setmetatable({}, { __gc = function() inner = json.decode('{"inner":[1,{"x":"y"}]}') end })
    local doc = json.decode(text)
    T.eq(#doc, 20000)
    T.eq(doc[20000].s, "x20000")
    T.eq(json.encode(doc[7].a), '[1,2,{"b":null}]')
  until inner or rounds >= 20
  T.ok(inner, "the finalizer ran during a decode")
  T.eq(json.encode(inner), '{"inner":[1,{"x":"y"}]}')
  -- and the shared decoder is free again
  T.eq(json.encode(json.decode("[[]]")), "[[]]")
end)

T.run()
