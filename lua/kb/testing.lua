--- kb.testing: the small test harness kbrun's own Lua tests use.
--
--   local T = require "kb.testing"
--   T.case("adds", function() T.eq(1 + 1, 2) end)
--   return T.run()          -- prints "N passed, N failed"; fails the scenario
--
-- Each case runs inside its own kb task, so it may call async functions
-- (kb.sleep, kb.http.get, ...). A case fails on the first failed assertion.
local M = {}

local cases = {}

--- Registers a test case.
-- @param name string shown in the report
-- @param fn function run as a kb task
function M.case(name, fn)
  cases[#cases + 1] = { name = name, fn = fn }
end

local function describe(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function fail(msg, level)
  error(msg, (level or 1) + 2)
end

--- Asserts that a == b (raw equality).
function M.eq(a, b, what)
  if a ~= b then
    fail(string.format("%sexpected %s, got %s", what and (what .. ": ") or "",
      describe(b), describe(a)))
  end
end

--- Asserts that |a - b| <= tol.
function M.near(a, b, tol, what)
  if type(a) ~= "number" or math.abs(a - b) > tol then
    fail(string.format("%sexpected %s +- %s, got %s", what and (what .. ": ") or "",
      describe(b), describe(tol), describe(a)))
  end
end

--- Asserts that v is truthy.
function M.ok(v, what)
  if not v then fail("expected a true value" .. (what and (": " .. what) or "")) end
  return v
end

--- Asserts that string s contains the plain text `part`.
function M.contains(s, part, what)
  if type(s) ~= "string" or not s:find(part, 1, true) then
    fail(string.format("%sexpected %s to contain %s", what and (what .. ": ") or "",
      describe(s), describe(part)))
  end
end

local function deep_eq(a, b, path)
  if type(a) ~= type(b) then
    return false, string.format("%s: type %s vs %s", path, type(a), type(b))
  end
  if type(a) ~= "table" then
    if a == b or (a ~= a and b ~= b) then return true end
    return false, string.format("%s: %s vs %s", path, describe(a), describe(b))
  end
  for k, v in pairs(a) do
    local ok, why = deep_eq(v, b[k], path .. "." .. tostring(k))
    if not ok then return false, why end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "." .. tostring(k) .. ": missing" end
  end
  return true
end

--- Asserts that two values are structurally equal (tables compared deeply).
function M.same(a, b, what)
  local ok, why = deep_eq(a, b, what or "value")
  if not ok then fail("not the same: " .. why) end
end

--- Asserts that fn(...) raises an error; returns the error value.
-- If `pattern` is given, tostring(err) must contain it (plain text).
function M.raises(fn, pattern, ...)
  local ok, err = pcall(fn, ...)
  if ok then fail("expected an error" .. (pattern and (" containing " .. describe(pattern)) or "")) end
  if pattern and not tostring(err):find(pattern, 1, true) then
    fail(string.format("error %s does not contain %s", describe(tostring(err)), describe(pattern)))
  end
  return err
end

--- Runs every registered case in order and reports. Raises if any failed,
-- so the scenario (and the ctest) fails.
function M.run()
  local kb = require "kb"
  local passed, failed = 0, 0
  for _, c in ipairs(cases) do
    local task = kb.spawn(c.fn)
    local ok, err = pcall(task.wait, task)
    if ok then
      passed = passed + 1
    else
      failed = failed + 1
      io.stderr:write(string.format("FAIL %s: %s\n", c.name, tostring(err)))
    end
  end
  print(string.format("%d passed, %d failed", passed, failed))
  cases = {}
  if failed > 0 then error(string.format("%d test case(s) failed", failed), 0) end
end

return M
