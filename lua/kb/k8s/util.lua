--- kb.k8s.util: small helpers shared by the Kubernetes client modules:
-- kb error objects, base64, RFC 3339 times, loopback test, deep copy and
-- comparison of decoded JSON.
local kb = require "kb"
local json = require "kb.json"

local M = {}

-- kb error objects share the runtime's "kb.error" metatable.
M.ErrorMeta = getmetatable(kb.cancelled)

--- A kb error object {class, message, ...fields}.
function M.error(class, message, fields)
  local e = fields or {}
  e.class, e.message = class, message
  return setmetatable(e, M.ErrorMeta)
end

--- Raises a kb error object (no position prefix).
function M.raise(class, message, fields)
  error(M.error(class, message, fields), 0)
end

function M.is_error(v)
  return type(v) == "table" and getmetatable(v) == M.ErrorMeta
end

-- ---- base64 (kubeconfig *-data fields, basic auth) -----------------------

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local DECODE = {}
for i = 1, 64 do DECODE[ALPHABET:byte(i)] = i - 1 end
DECODE[("-"):byte()], DECODE[("_"):byte()] = 62, 63 -- URL-safe variant

--- base64 text (white space ignored) -> bytes, or nil and a reason.
function M.b64decode(text)
  text = text:gsub("%s", ""):gsub("=+$", "")
  if #text % 4 == 1 then return nil, "truncated base64" end
  local out, n = {}, 0
  for i = 1, #text, 4 do
    local a, b, c, d = text:byte(i, i + 3)
    local va, vb = DECODE[a], DECODE[b]
    local vc, vd = c and DECODE[c] or 0, d and DECODE[d] or 0
    if not va or not vb or (c and not DECODE[c]) or (d and not DECODE[d]) then
      return nil, "invalid base64 character"
    end
    local v = ((va * 64 + vb) * 64 + vc) * 64 + vd
    n = n + 1
    if d then
      out[n] = string.char(v >> 16, (v >> 8) & 255, v & 255)
    elseif c then
      out[n] = string.char(v >> 16, (v >> 8) & 255)
    else
      out[n] = string.char(v >> 16)
    end
  end
  return table.concat(out)
end

function M.b64encode(bytes)
  local out = {}
  for i = 1, #bytes, 3 do
    local a, b, c = bytes:byte(i, i + 2)
    local v = (a << 16) | ((b or 0) << 8) | (c or 0)
    local s = {
      ALPHABET:sub((v >> 18) + 1, (v >> 18) + 1),
      ALPHABET:sub(((v >> 12) & 63) + 1, ((v >> 12) & 63) + 1),
      b and ALPHABET:sub(((v >> 6) & 63) + 1, ((v >> 6) & 63) + 1) or "=",
      c and ALPHABET:sub((v & 63) + 1, (v & 63) + 1) or "=",
    }
    out[#out + 1] = table.concat(s)
  end
  return table.concat(out)
end

-- ---- times ------------------------------------------------------------------

--- The Levenshtein edit distance of two short strings, for "did you
-- mean" (kb.runner's scenario keys, kb.openapi's path segments).
function M.edit_distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    local ca = a:byte(i)
    for j = 1, #b do
      local cost = ca == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

--- Days since 1970-01-01 of a civil (proleptic Gregorian) date, exact for
-- any year (Howard Hinnant's algorithm). kb.retry (HTTP dates) and
-- kb.kfp.states (RFC 3339 times) use it too.
function M.days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m + (m > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

--- RFC 3339 text ("2024-01-01T00:00:05Z", with fraction or offset) ->
-- epoch seconds (float), or nil. Numbers pass through.
function M.parse_time(s)
  if type(s) == "number" then return s end
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, rest =
    s:match("^(%d%d%d%d)-(%d%d)-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  local t = M.days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400
    + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
  local frac, zone = rest:match("^(%.%d+)(.*)$")
  if frac then t, rest = t + tonumber("0" .. frac), zone end
  if rest == "Z" or rest == "z" then return t end
  local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
  if not sign then return nil end
  local off = tonumber(oh) * 3600 + tonumber(om) * 60
  return sign == "+" and t - off or t + off
end

--- epoch seconds -> "2024-01-01T00:00:05Z".
function M.format_time(t)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(t))
end

-- ---- hosts ------------------------------------------------------------------

function M.is_loopback(name)
  name = name:lower()
  return name == "localhost" or name:match("%.localhost$") ~= nil or name == "::1"
    or name:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

--- scheme, host name (lower case, no brackets), base URL (no trailing
-- slash) of a server URL, or raises a config error.
function M.parse_server(url, where)
  if type(url) ~= "string" or url == "" then
    M.raise("config", string.format("kb.k8s: %s has no server URL", where))
  end
  local scheme, rest = url:match("^(%a[%w+.-]*)://(.*)$")
  scheme = scheme and scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    M.raise("config", string.format("kb.k8s: %s: server must start with https:// or http://, "
      .. "got %q", where, url))
  end
  local authority, prefix = rest:match("^([^/?#]*)(.*)$")
  if authority:find("@", 1, true) then
    M.raise("config", string.format("kb.k8s: %s: server must not carry credentials "
      .. "(user:password@)", where))
  end
  local name = authority:match("^%[(.-)%]") or authority:match("^([^:]*)")
  if name == "" then M.raise("config", string.format("kb.k8s: %s: server %q has no host name",
    where, url)) end
  return scheme, name:lower(), scheme .. "://" .. authority .. prefix:gsub("/+$", "")
end

-- ---- decoded JSON -----------------------------------------------------------

local ARRAY_META = getmetatable(json.array({}))

function M.is_array(t)
  if type(t) ~= "table" then return false end
  if getmetatable(t) == ARRAY_META then return true end
  if next(t) == nil then return false end
  return #t > 0 and next(t, #t) == nil and t[1] ~= nil
end

function M.deep_copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = M.deep_copy(x) end
  return setmetatable(c, getmetatable(v))
end

function M.deep_equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do
    if not M.deep_equal(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

--- A selector text "a=b,c" from a string or a table {a = "b", c = true}
-- (keys sorted).
function M.selector(v, what)
  if v == nil or type(v) == "string" then return v end
  if type(v) ~= "table" then error("kb.k8s: " .. what .. " must be a string or a table", 3) end
  local parts = {}
  for _, k in ipairs(M.sorted_keys(v)) do
    local x = v[k]
    parts[#parts + 1] = x == true and k or (k .. "=" .. tostring(x))
  end
  return table.concat(parts, ",")
end

--- Text trimmed to one line of at most max characters.
function M.trim(text, max)
  text = tostring(text):gsub("%s+", " "):match("^%s*(.-)%s*$")
  if #text > max then text = text:sub(1, max) .. "..." end
  return text
end

--- A whole response in the shape of a kb.http stream, for an opts.http
-- without stream() (a test double): its body comes at once, when the
-- request has ended, so its watch events come window by window.
function M.body_stream(r)
  local body, pos = r.body, 1
  local s = { status = r.status, headers = r.headers, version = r.version, time = r.time }
  function s.read()
    if not body or pos > #body then return nil end
    local rest = body:sub(pos)
    pos = #body + 1
    return rest
  end
  function s.lines()
    return function()
      if not body or pos > #body then return nil end
      local nl = body:find("\n", pos, true) or #body + 1
      local line = body:sub(pos, nl - 1)
      pos = nl + 1
      return line
    end
  end
  function s.close() body = nil end
  return setmetatable(s, { __close = s.close })
end

--- u.read_whole(stream) -> a kb.http response {status, headers, version,
-- time, body}: a streamed answer with an error status is read whole, so
-- its body (a Status, an argo-server error) can explain the error.
function M.read_whole(s)
  local st <close> = s
  local parts = {}
  for chunk in st.read, st do parts[#parts + 1] = chunk end
  return { status = st.status, headers = st.headers, version = st.version, time = st.time,
    body = table.concat(parts) }
end

return M
