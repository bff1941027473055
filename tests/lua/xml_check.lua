-- A tiny well-formedness checker for the SVG and HTML kb.report.svg / kb.report
-- write (used by test_svg.lua and test_report.lua; not a test itself).
--
--   local check = require "xml_check"
--   local ok, err = check(text)                 -- XML (SVG)
--   local ok, err = check(text, { html = true }) -- HTML: doctype, void tags
--
-- Checks: tags nest and close in order, attributes are name="value" and
-- not repeated, `&` only starts a known entity, no raw `<` or `>` in text
-- or attribute values, no control characters XML forbids.
local VOID = { meta = true, link = true, br = true, hr = true, img = true, input = true, wbr = true }

local function check_chars(s, where)
  local bad = s:find("[%z\1-\8\11\12\14-\31]")
  if bad then return nil, string.format("control character in %s at %d", where, bad) end
  if s:find(">", 1, true) then return nil, "raw '>' in " .. where .. ": " .. s:sub(1, 80) end
  local i = 1
  while true do
    local amp = s:find("&", i, true)
    if not amp then return true end
    local ent = s:match("^&([#%w]+);", amp)
    if not ent or not (ent == "amp" or ent == "lt" or ent == "gt" or ent == "quot" or ent == "apos"
        or ent:match("^#%d+$") or ent:match("^#x%x+$")) then
      return nil, "bad entity in " .. where .. ": " .. s:sub(amp, amp + 10)
    end
    i = amp + 1
  end
end

return function(s, opts)
  local html = opts and opts.html
  local stack = {}
  local i = 1
  local n = #s
  while i <= n do
    local lt = s:find("<", i, true)
    local ok, err = check_chars(s:sub(i, (lt or n + 1) - 1), "text")
    if not ok then return nil, err end
    if not lt then break end
    if s:sub(lt, lt + 3) == "<!--" then
      local e = s:find("-->", lt + 4, true)
      if not e then return nil, "unclosed comment" end
      i = e + 3
    elseif s:sub(lt, lt + 1) == "<!" then
      if not html or not s:sub(lt, lt + 9):upper():find("<!DOCTYPE", 1, true) then
        return nil, "unexpected <! at " .. lt
      end
      i = s:find(">", lt, true) + 1
    else
      local close = s:find(">", lt, true)
      if not close then return nil, "unclosed tag at " .. lt end
      local tag = s:sub(lt + 1, close - 1)
      if tag:find("<", 1, true) then return nil, "'<' inside a tag at " .. lt end
      if tag:sub(1, 1) == "/" then
        local name = tag:match("^/([%a][%w:-]*)%s*$")
        if not name then return nil, "bad end tag <" .. tag .. ">" end
        local top = table.remove(stack)
        if top ~= name then
          return nil, string.format("</%s> closes <%s> at %d", name, tostring(top), lt)
        end
      else
        local name = tag:match("^([%a][%w:-]*)")
        if not name then return nil, "bad tag <" .. tag:sub(1, 40) .. ">" end
        local rest = tag:sub(#name + 1)
        local self_closing = rest:sub(-1) == "/"
        if self_closing then rest = rest:sub(1, -2) end
        local seen = {}
        while true do
          local sp, attr, value, after = rest:match("^(%s+)([%a_:][%w_:.-]*)=\"([^\"]*)\"()")
          if not sp then break end
          if seen[attr] then return nil, "repeated attribute " .. attr .. " in <" .. name .. ">" end
          seen[attr] = true
          local okv, errv = check_chars(value, "attribute " .. attr)
          if not okv then return nil, errv end
          rest = rest:sub(after)
        end
        if not rest:match("^%s*$") then
          return nil, string.format("bad attributes in <%s>: %s", name, rest:sub(1, 60))
        end
        if not self_closing and not (html and VOID[name]) then stack[#stack + 1] = name end
      end
      i = close + 1
    end
  end
  if #stack > 0 then return nil, "unclosed <" .. stack[#stack] .. ">" end
  return true
end
