--- kb.secrets: the credential chores every API client shares: reading a
-- bearer-token file (re-read when it rotates) and scrubbing a client's own
-- secrets out of text a server may echo back into an error.
local fs = require "kb.fs"

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

local function escape_pattern(s)
  return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

--- text with every secret of the list (4 characters or more; false and nil
-- entries skipped) replaced by "<redacted>". Non-strings pass through.
function M.scrub(text, secrets)
  if type(text) ~= "string" then return text end
  for _, secret in ipairs(secrets) do
    if type(secret) == "string" and #secret >= 4 then
      text = text:gsub(escape_pattern(secret), "<redacted>")
    end
  end
  return text
end

return M
