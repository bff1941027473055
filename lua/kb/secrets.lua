--- kb.secrets: the credential chores every API client shares: reading a
-- bearer-token file (re-read when it rotates), a process-wide register of
-- every credential the process sends, and scrubbing them out of text a
-- server may echo back into an error.
--
-- The register: kb.kfp, kb.k8s and kb.argo register each credential they
-- send (tokens from token=, token_file= and kubeconfig users, exec plugin
-- tokens, basic auth, header values of headers= that carry credentials,
-- cookies), whatever its source, before it goes out. M.scrub replaces
-- every registered secret, in plain text and base64 (standard and URL-safe
-- alphabets, at each of the three alignments a secret can have inside a
-- longer base64 text), so an error message quoting what the server echoed
-- never holds one, and nor does anything it is written to (stderr,
-- result.json, the journal, the report).
local fs = require "kb.fs"
local u = require "kb.k8s.util"

local M = {}

local function reason_of(err)
  if type(err) == "table" then return err.reason or err.message or tostring(err) end
  return tostring(err)
end

--- Reads a one-line token file. Problems go to fail(fmt, ...), which
-- raises (each client raises its own class "auth" error); `what` names the
-- file in messages ("token_file" by default).
function M.read_token(path, fail, what)
  what = what or "token_file"
  local ok, text = pcall(fs.read, path)
  if not ok then fail("cannot read %s '%s': %s", what, path, reason_of(text)) end
  local token = text:match("^%s*(.-)%s*$")
  if token == "" then fail("%s '%s' is empty", what, path) end
  if token:find("%c") then fail("%s '%s' holds more than one line", what, path) end
  return token
end

--- The token of `path` if the file changed since state.mtime/state.size
-- (projected service-account tokens rotate), updating them; nil when
-- unchanged.
function M.refresh(state, path, fail, what)
  local ok, st = pcall(fs.stat, path)
  if not ok then fail("cannot stat %s '%s': %s", what or "token_file", path, reason_of(st)) end
  if st.mtime == state.mtime and st.size == state.size then return nil end
  local token = M.read_token(path, fail, what)
  state.mtime, state.size = st.mtime, st.size
  return token
end

--- What a client's credentials are, for the hint of an auth error (never
-- their values): `s` holds the client's token_file, token,
-- credential_headers (names) and cookies. nil when none were given.
function M.describe_credentials(s)
  local parts = {}
  if s.token_file then
    parts[#parts + 1] = string.format("the token in token_file '%s'", s.token_file)
  elseif s.token then
    parts[#parts + 1] = "the token= value"
  end
  if s.credential_headers then
    parts[#parts + 1] = "the header" .. (#s.credential_headers > 1 and "s " or " ")
      .. table.concat(s.credential_headers, ", ") .. " of headers="
  end
  if s.cookies then parts[#parts + 1] = "the session cookie (cookies=)" end
  return #parts > 0 and table.concat(parts, " and ") or nil
end

local function escape_pattern(s)
  return (s:gsub("[^%w]", "%%%0"))
end

-- A secret's base64, unpadded: "=" may be absent where it is echoed.
local function b64(bytes)
  return (u.b64encode(bytes):gsub("=+$", ""))
end

-- The base64 texts that a secret becomes inside any base64 text: with 0, 1
-- or 2 bytes before it, the characters that depend on the secret alone (a
-- boundary character also holds bits of its neighbour). Each in the
-- standard and the URL-safe alphabet.
local function b64_forms(secret)
  local forms = { b64(secret) } -- the secret encoded alone, its last character too
  for pad = 0, 2 do
    local e = b64(string.rep("\0", pad) .. secret)
    local first = pad == 0 and 1 or pad + 2 -- skip the characters the pad bytes touch
    local total = pad + #secret
    -- whole characters: the last one is partial unless the bytes end a group
    local last = (total % 3 == 0) and #e or (#e - 1)
    local core = e:sub(first, last)
    if #core >= 4 then forms[#forms + 1] = core end
  end
  for i = 1, #forms do
    local url = forms[i]:gsub("[+/]", { ["+"] = "-", ["/"] = "_" })
    if url ~= forms[i] then forms[#forms + 1] = url end
  end
  return forms
end

-- The register: text -> true, and the list longest first (a secret that
-- contains another is replaced whole).
local registered, list = {}, {}

local function add(text)
  if type(text) ~= "string" or #text < 4 or registered[text] then return end
  registered[text] = true
  list[#list + 1] = text
end

--- secrets.register(value [, ...]): registers credentials the process
-- sends, each with its base64 forms. A header value "Bearer x" / "Basic x"
-- registers x as well (and the user:password that basic auth encodes, and
-- the password), a cookie header each value. Values shorter than 4
-- characters are not registered (they would redact ordinary words).
function M.register(...)
  local before = #list
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "string" and #v >= 4 then
      local parts = { v }
      local scheme, cred = v:match("^%s*(%a[%w-]*)%s+(%S+)%s*$")
      if scheme then
        parts[#parts + 1] = cred
        if scheme:lower() == "basic" then
          local plain = M.b64decode(cred)
          if plain then
            parts[#parts + 1] = plain
            parts[#parts + 1] = plain:match("^[^:]*:(.*)$")
          end
        end
      end
      if v:find("=", 1, true) then -- a cookie header: name=value; name=value
        for value in v:gmatch("[^;=%s]+=%s*([^;]+)") do parts[#parts + 1] = value:match("^(.-)%s*$") end
      end
      for _, p in ipairs(parts) do
        add(p)
        for _, f in ipairs(b64_forms(p)) do add(f) end
      end
    end
  end
  if #list > before then table.sort(list, function(a, b) return #a > #b end) end
end

--- secrets.registered() -> the number of registered texts (each secret
-- with its forms), for tests.
function M.registered()
  return #list
end

--- base64 (either alphabet, padding optional) -> bytes, or nil.
M.b64decode = u.b64decode

local function replace(text, secret)
  return (text:gsub(escape_pattern(secret), "<redacted>"))
end

--- text with every registered secret, and every one of the list (4
-- characters or more; false and nil entries skipped; registered by this
-- call), replaced by "<redacted>". Non-strings pass through.
function M.scrub(text, secrets)
  if type(text) ~= "string" then return text end
  if secrets then M.register(table.unpack(secrets, 1, #secrets)) end
  for _, secret in ipairs(list) do
    if text:find(secret, 1, true) then text = replace(text, secret) end
  end
  return text
end

return M
