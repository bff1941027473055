-- kb.csv (lua/kb/csv.lua).
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local csv = require "kb.csv"

local root
do
  local out = os.getenv("KBRUN_TEST_OUT")
  if out then
    root = fs.join(fs.abspath(out), "test_csv")
    fs.remove(root, { recursive = true })
    fs.mkdir(root)
  else
    root = fs.tmpdir("kbrun-test-csv")
  end
end

T.case("quoting: comma, quote, CR, LF, edge spaces, unicode", function()
  T.eq(csv.encode_row({ "plain", "a,b", 'say "hi"', "two\nlines", "cr\rx", " lead", "trail ",
    "\ttab", "in side", "", "ünï, cødé", "日本語" }),
    'plain,"a,b","say ""hi""","two\nlines","cr\rx"," lead","trail ","\ttab",in side,,"ünï, cødé",日本語')
  T.eq(csv.encode_row({ '"' }), '""""')
  T.eq(csv.encode_row({ "" }), '""') -- not a blank line
  T.eq(csv.encode_row({ "", "" }), ",")
  T.eq(csv.encode_row({}), "")
end)

T.case("values: numbers without loss, booleans, nil and null", function()
  T.eq(csv.encode_row({ 1, -7, 0, math.maxinteger, math.mininteger }),
    "1,-7,0,9223372036854775807,-9223372036854775808")
  T.eq(csv.encode_row({ 0.1, 0.25, 1 / 3, 0.1 + 0.2, 3.0, -0.5, 1e300, 2 ^ 53 }),
    "0.1,0.25,0.3333333333333333,0.30000000000000004,3,-0.5,1e+300,9007199254740992")
  T.eq(csv.encode_row({ 0 / 0, math.huge, -math.huge }), "nan,inf,-inf")
  T.eq(csv.encode_row({ true, false, json.null, n = 4 }), "true,false,,")
  T.eq(csv.encode_row({ 1, nil, 3, n = 3 }), "1,,3")
  for _, v in ipairs({ 0.1, 1 / 3, math.pi, 1e-310, 123456.789, 2 ^ -40, 6.02214076e23 }) do
    T.eq(tonumber(csv.format_number(v)), v, "round trip of " .. string.format("%.17g", v))
  end
end)

-- The rules, written out in Lua: what kb.csv's C row encoder must give.
local function reference_row(list, n)
  local scrub = require("kb.secrets").scrub
  local out = {}
  for i = 1, n do
    local v, text = list[i], nil
    if type(v) == "string" then text = scrub(v)
    elseif math.type(v) == "integer" then text = string.format("%d", v)
    elseif type(v) == "number" then
      if v ~= v then text = "nan" elseif v == math.huge then text = "inf"
      elseif v == -math.huge then text = "-inf"
      else
        for precision = 14, 17 do
          text = string.format("%." .. precision .. "g", v)
          if tonumber(text) == v then break end
        end
      end
    elseif v == nil or v == json.null then text = ""
    else text = tostring(v) end
    if text:find('[,"\r\n]') or text:find("^[ \t]") or text:find("[ \t]$") then
      text = '"' .. text:gsub('"', '""') .. '"'
    end
    out[i] = text
  end
  if n == 1 and out[1] == "" then return '""' end
  return table.concat(out, ",", 1, n)
end

T.case("rows: the same text as the rules, for random cells (a fixed seed)", function()
  local rng = { 0x2545F491 }
  local function rand(k)
    rng[1] = (rng[1] * 1103515245 + 12345) % 2147483648
    return rng[1] % k
  end
  local pieces = { "a", ",", '"', "\n", "\r", " ", "\t", "x y", "ünï", "", "poll.run.get" }
  local function cell()
    local k = rand(9)
    if k == 0 then return nil end
    if k == 1 then return json.null end
    if k == 2 then return rand(2) == 0 end
    if k == 3 then return rand(2000000) - 1000000 end
    if k == 4 then return (rand(2 ^ 30) + 1) / (rand(2 ^ 20) + 1) end
    if k == 5 then return rand(1000000) * 1e-9 end
    local t = {}
    for j = 1, rand(4) do t[j] = pieces[rand(#pieces) + 1] end
    return table.concat(t)
  end
  for _ = 1, 3000 do
    local n = rand(7)
    local row = { n = n }
    for i = 1, n do row[i] = cell() end
    T.eq(csv.encode_row(row), reference_row(row, n))
  end
end)

T.case("rows: text cells are scrubbed, other values use tostring", function()
  local secrets = require "kb.secrets"
  secrets.register("s3cr3t-csv-cell-value")
  T.eq(csv.encode_row({ "token s3cr3t-csv-cell-value here", 1 }), "token <redacted> here,1")
  local obj = setmetatable({}, { __tostring = function() return "a, b" end })
  T.eq(csv.encode_row({ obj }), '"a, b"')
end)

T.case("encode with a header, list and map rows", function()
  local text = csv.encode({ { "taxi", 12, 0.5 }, { name = "cnn", mean = 1.5 }, { runs = 3 } },
    { "name", "runs", "mean" })
  T.eq(text, "name,runs,mean\ntaxi,12,0.5\ncnn,,1.5\n,3,\n")
  T.eq(csv.encode({ { "a", "b" } }, nil, { eol = "\r\n" }), "a,b\r\n")
  T.eq(csv.encode({}), "")
  T.raises(csv.encode, "kb.csv.encode: map rows need a header", { { a = 1 } })
  T.raises(csv.encode, 'kb.csv.encode: column "b" is not in the header', { { b = 1 } }, { "a" })
  T.raises(csv.encode, "kb.csv.encode: row has 2 fields but the header has 1", { { 1, 2 } }, { "a" })
  T.raises(csv.encode, 'opts.eol must be "\\n" or "\\r\\n"', {}, nil, { eol = ";" })
end)

T.case("parse: quotes, embedded line breaks, line endings, blanks", function()
  T.same(csv.parse('a,b,c\n1,"x, y","say ""hi"""\n'), { { "a", "b", "c" }, { "1", "x, y", 'say "hi"' } })
  T.same(csv.parse('id,note\r\n1,"two\r\nlines"\r\n2,"lf\nonly"'),
    { { "id", "note" }, { "1", "two\r\nlines" }, { "2", "lf\nonly" } })
  T.same(csv.parse("a,,c,\n,\n"), { { "a", "", "c", "" }, { "", "" } })
  T.same(csv.parse("x\n\n\ny\n"), { { "x" }, { "y" } })
  T.same(csv.parse('""\n'), { { "" } })
  T.same(csv.parse("a\rb\r"), { { "a" }, { "b" } })
  T.same(csv.parse("trailing,"), { { "trailing", "" } })
  T.same(csv.parse("ünï,日本語\n"), { { "ünï", "日本語" } })
  T.same(csv.parse(""), {})
  T.same(csv.parse('lenient "inner" quotes,x'), { { 'lenient "inner" quotes', "x" } })
  T.same(csv.parse("a\nb\nc\n", { limit = 2 }), { { "a" }, { "b" } })
end)

-- The parse rules in Lua, as kb.csv had them before its C parser: the
-- reference its records and errors are held to.
local function reference_parse(text, limit)
  local rows, row, blank = {}, {}, true
  local i, n = 1, #text
  local function finish()
    if not (blank and #row == 1) then rows[#rows + 1] = row end
    row, blank = {}, true
  end
  while i <= n do
    local field
    if text:byte(i) == 34 then
      local parts, j = {}, i + 1
      while true do
        local q = text:find('"', j, true)
        if not q then return nil, "unterminated", i end
        parts[#parts + 1] = text:sub(j, q - 1)
        if text:byte(q + 1) ~= 34 then field, i = table.concat(parts), q + 1 break end
        parts[#parts + 1] = '"'
        j = q + 2
      end
      blank = false
    else
      local e = text:find("[,\r\n]", i) or n + 1
      field = text:sub(i, e - 1)
      if e > i then blank = false end
      i = e
    end
    row[#row + 1] = field
    local b = text:byte(i)
    if b == 44 then
      blank = false
      i = i + 1
      if i > n then row[#row + 1] = "" end
    elseif b == 13 or b == 10 then
      i = i + ((b == 13 and text:byte(i + 1) == 10) and 2 or 1)
      finish()
      if #rows >= limit then return rows end
    elseif b then
      return nil, "unexpected", i, string.char(b)
    end
  end
  if #row > 0 then finish() end
  return rows
end

T.case("parse: the same records and errors as the reference rules, for random text", function()
  local alphabet = { "a", "b7", ",", '"', '""', "\n", "\r", "\r\n", " ", "é", "", ",,", '",' }
  local state = 777 -- a fixed LCG: the same texts every run
  local function rand(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n + 1
  end
  local errors, parsed = 0, 0
  for _ = 1, 3000 do
    local parts = {}
    for k = 1, rand(30) - 1 do parts[k] = alphabet[rand(#alphabet)] end
    local text = table.concat(parts)
    local limit = rand(4) == 1 and rand(3) or math.huge
    local want, what, pos, char = reference_parse(text, limit)
    local ok, got = pcall(csv.parse, text, { limit = limit })
    if want then
      parsed = parsed + 1
      T.ok(ok, "parses " .. string.format("%q", text))
      T.same(got, want, string.format("%q", text))
    else
      errors = errors + 1
      T.ok(not ok and got.class == "csv", "refuses " .. string.format("%q", text))
      local line = select(2, text:sub(1, pos - 1):gsub("\n", "")) + 1
      local expect = what == "unterminated"
        and ("kb.csv.parse: unterminated quoted field starting on line " .. line)
        or string.format("kb.csv.parse: unexpected %q after a closing quote on line %d", char, line)
      T.eq(got.message, expect, string.format("%q", text))
    end
  end
  T.ok(errors > 300 and parsed > 300, "both kinds drawn: " .. errors .. " errors, " .. parsed .. " parsed")
end)

T.case("parse with a header gives records", function()
  local records, header = csv.parse("name,runs\ntaxi,12\ncnn\n", { header = true })
  T.same(header, { "name", "runs" })
  T.same(records, { { name = "taxi", runs = "12" }, { name = "cnn" } })
  local err = T.raises(csv.parse, nil, "a\n1,2\n", { header = true })
  T.eq(err.message, "kb.csv.parse: record 1 has 2 fields but the header has 1")
end)

T.case("parse errors name the line", function()
  local err = T.raises(csv.parse, nil, 'a,b\n1,"open\n\nstill open')
  T.eq(err.class, "csv")
  T.eq(err.message, "kb.csv.parse: unterminated quoted field starting on line 2")
  T.eq(tostring(err), "csv: " .. err.message)
  err = T.raises(csv.parse, nil, 'ok\n"q"x,2\n')
  T.eq(err.message, 'kb.csv.parse: unexpected "x" after a closing quote on line 2')
end)

T.case("parse(encode(rows)) round trips awkward text", function()
  local alphabet = { "a", "Z", "0", ",", '"', "\n", "\r", "\r\n", " ", "\t", "é", "日", "'", ";", "" }
  local state = 12345 -- a fixed LCG: the same rows every run
  local function rand(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return state % n + 1
  end
  local rows = {}
  for r = 1, 200 do
    local row = {}
    for c = 1, rand(6) do
      local parts = {}
      for k = 1, rand(8) - 1 do parts[k] = alphabet[rand(#alphabet)] end
      row[c] = table.concat(parts)
    end
    rows[r] = row
  end
  T.same(csv.parse(csv.encode(rows)), rows)
  T.same(csv.parse(csv.encode(rows, nil, { eol = "\r\n" })), rows)
end)

T.case("writer: header once, list and map rows, flushed per row", function()
  local file = fs.join(root, "w1", "runs.csv")
  local w = csv.writer(file, { "run", "status", "seconds" })
  T.eq(fs.read(file), "run,status,seconds\n")
  w:write({ "r1", "Succeeded", 12.5 })
  T.eq(fs.read(file), "run,status,seconds\nr1,Succeeded,12.5\n") -- before close
  w:write({ run = "r2", seconds = 3 })
  T.eq(w:write({ "r3, quoted" }), w)
  w:close()
  w:close()
  T.eq(fs.read(file), 'run,status,seconds\nr1,Succeeded,12.5\nr2,,3\n"r3, quoted",,\n')
  T.raises(w.write, "kb.csv.writer: '" .. file .. "' is closed", w, { "x" })
  T.eq(w.rows, 3)

  do -- reopening appends without a second header
    local again <close> = csv.writer(file, { "run", "status", "seconds" })
    again:write({ "r4", "Failed", 1 })
  end
  local rows = csv.parse(fs.read(file))
  T.eq(#rows, 5)
  T.same(rows[5], { "r4", "Failed", "1" })

  local w2 = csv.writer(file, { "run", "status", "seconds" })
  T.raises(w2.write, 'kb.csv.writer: column "oops" is not in the header', w2, { oops = 1 })
  T.raises(w2.write, "kb.csv.writer: row has 4 fields but the header has 3", w2, { 1, 2, 3, 4 })
  T.raises(w2.write, "kb.csv.writer: a row must be a table, got string", w2, "r5")
  w2:close()
  T.raises(csv.writer, "header must be a non-empty list", file, {})
  T.raises(csv.writer, "header[2] must be a unique string", file, { "a", "a" })
end)

T.case("writer: buffered rows go out at flush, at 512 rows and at close, in order", function()
  local file = fs.join(root, "wb", "latencies.csv")
  local w = csv.writer(file, { "op", "latency" }, { buffered = true })
  T.eq(fs.read(file), "op,latency\n")
  w:write({ "a", 1 })
  w:write({ op = "b", latency = 2 })
  T.eq(fs.read(file), "op,latency\n", "held back")
  T.eq(w:flush(), w)
  T.eq(fs.read(file), "op,latency\na,1\nb,2\n")
  local want = { { "a", 1 }, { "b", 2 } }
  for i = 1, 511 do
    want[#want + 1] = { "c", i }
    w:write(want[#want])
  end
  T.eq(#csv.parse(fs.read(file)), 1 + 2, "511 rows still held")
  want[#want + 1] = { "d", 0.5 }
  w:write(want[#want])
  T.eq(#csv.parse(fs.read(file)), 1 + 2 + 512, "the 512th wrote them all")
  want[#want + 1] = { "e", 3 }
  w:write(want[#want])
  w:close()
  T.eq(fs.read(file), csv.encode(want, { "op", "latency" }))
  T.eq(w.rows, #want)
  T.eq(w:flush(), w, "a no-op once closed")
  -- lock mode writes through
  local l = csv.writer(fs.join(root, "wb", "locked.csv"), { "x" }, { buffered = true, lock = true })
  l:write({ 1 })
  T.eq(fs.read(fs.join(root, "wb", "locked.csv")), "x\n1\n")
  l:close()
end)

T.case("writer: other columns raise, or extend the file", function()
  local file = fs.join(root, "w2", "report.csv")
  local w = csv.writer(file, { "id", "mean" })
  w:write({ "e1", 1.5 })
  w:close()
  local err = T.raises(csv.writer, nil, file, { "id", "mean", "p99" })
  T.eq(err.class, "csv")
  T.eq(err.message, "kb.csv.writer: '" .. file ..
    "' has the columns id,mean, not id,mean,p99 (pass {extend = true} to add columns)")

  w = csv.writer(file, { "id", "p99", "mean" }, { extend = true })
  T.eq(fs.read(file), "id,mean,p99\ne1,1.5,\n") -- rewritten, old row padded
  w:write({ "e2", 9, 2.5 }) -- a list follows the writer's own header order
  w:write({ id = "e3", mean = 3 })
  w:close()
  T.eq(fs.read(file), "id,mean,p99\ne1,1.5,\ne2,2.5,9\ne3,3,\n")

  w = csv.writer(file, { "id" }, { extend = true }) -- a subset: nothing to rewrite
  w:write({ "e4" })
  w:close()
  T.eq(fs.read(file), "id,mean,p99\ne1,1.5,\ne2,2.5,9\ne3,3,\ne4,,\n")
end)

T.case("writer: lock mode for files shared between processes", function()
  local file = fs.join(root, "w3", "report.csv")
  local a = csv.writer(file, { "id", "mean" }, { lock = true, extend = true })
  local b = csv.writer(file, { "id", "mean", "p50" }, { lock = true, extend = true })
  a:write({ "a1", 1 }) -- sees b's extra column, writes an empty cell
  b:write({ "b1", 2, 3 })
  a:close()
  b:close()
  T.eq(fs.read(file), "id,mean,p50\na1,1,\nb1,2,3\n")
  T.eq(fs.exists(file .. ".lock"), "file")
end)

T.case("writer: CRLF files", function()
  local file = fs.join(root, "w4", "excel.csv")
  local w <close> = csv.writer(file, { "a", "b" }, { eol = "\r\n" })
  w:write({ 1, "x\r\ny" })
  T.eq(fs.read(file), 'a,b\r\n1,"x\r\ny"\r\n')
end)

T.run()
if not os.getenv("KBRUN_TEST_OUT") then fs.remove(root, { recursive = true }) end
