-- bench/lua_profile.lua FILE [N]: a summary of a KBRUN_LUA_PROFILE file
-- (folded stacks, src/rt/profile.c): the N (default 25) hottest leaf lines
-- (self) and functions (inclusive: samples whose stack passes through them),
-- as shares of all samples. Run it with any Lua 5.4: lua5.4 bench/lua_profile.lua FILE
local path, top = arg[1], tonumber(arg[2]) or 25
assert(path, "usage: lua5.4 bench/lua_profile.lua FILE [N]")
local self, incl, total = {}, {}, 0
for line in io.lines(path) do
  local stack, n = line:match("^(.*) (%d+)$")
  n = tonumber(n)
  if stack then
    total = total + n
    local frames = {}
    for f in stack:gmatch("[^;]+") do frames[#frames + 1] = f end
    local leaf = frames[#frames]
    self[leaf] = (self[leaf] or 0) + n
    local seen = {}
    for i, f in ipairs(frames) do
      -- a function is its file:linedefined; the leaf frame carries its current line
      local key = i == #frames and f:gsub(":%d+ ", ": ", 1) or f
      if not seen[key] then
        seen[key] = true
        incl[key] = (incl[key] or 0) + n
      end
    end
  end
end
local function show(title, t)
  local rows = {}
  for k, v in pairs(t) do rows[#rows + 1] = { k, v } end
  table.sort(rows, function(a, b) return a[2] > b[2] end)
  print(("%s (%d samples)"):format(title, total))
  for i = 1, math.min(top, #rows) do
    print(("%6.1f%%  %s"):format(100 * rows[i][2] / total, rows[i][1]:gsub("^.*/lua/", "")))
  end
end
show("self", self)
print()
show("inclusive", incl)
