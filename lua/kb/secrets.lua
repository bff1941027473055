--- kb.secrets: the credential chores every API client shares: reading a
-- bearer-token file (re-read when it rotates), a process-wide register of
-- every credential the process sends, and scrubbing them out of text a
-- server may echo back into an error.
--
-- The register: kb.kfp, kb.k8s and kb.argo register each credential they
-- send (tokens from token=, token_file= and kubeconfig users, exec plugin
-- tokens, basic auth, header values of headers= that carry credentials,
-- cookies), whatever its source, before it goes out; so does kb.params
-- for the value of a parameter a scenario declares secret.
--
-- The scrubber: M.scrub(text) is the one function every value kbrun writes
-- passes (docs/security.md): registered secrets, in plain text, JSON-escaped
-- and base64 (standard and URL-safe alphabets, at each of the three
-- alignments a secret can have inside a longer base64 text), become
-- "<redacted>"; then the pattern rules of kb_redact (include/kb/redact.h,
-- the C logger applies them to every log line too): a URL's userinfo
-- becomes "***", query parameters and key=value pairs named like
-- credentials, Authorization and Cookie headers, bearer tokens, JWTs and
-- PEM private keys become "[REDACTED]". M.scrub_value does it to every
-- string of a table, and to the values of fields named like credentials
-- or declared secret (M.protect); M.encode_json is what the writers of
-- config/params.json, result.json and the journal encode with; the report
-- writer scrubs its document with M.scrub_value. Loading this module also
-- makes kb.log's debug/info/warn/error replace registered secrets before
-- the C logger sees the line (the C layers never hold them).
local fs = require "kb.fs"
local u = require "kb.k8s.util"
local log = require "kb.log"
local json = require "kb.json"

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

-- Scrubbed strings, reset when the register grows (metric names, op
-- names and the like repeat in every journal record).
local cache, cached = {}, 0
local key_kind, kinds = {}, 0 -- flat_and_clean's judgement of record keys (below)
local CACHE_MAX, CACHE_LEN = 4096, 256

local function add(text, min)
  if type(text) ~= "string" or #text < (min or 4) or registered[text] then return end
  registered[text] = true
  list[#list + 1] = text
end

--- secrets.register(value [, ...]): registers credentials the process
-- sends, each with its base64 forms. A header value "Bearer x" / "Basic x"
-- registers x as well (and the user:password that basic auth encodes, and
-- the password), a cookie header each value. Values shorter than 4
-- characters are not registered (they would redact ordinary words).
local seen_values = {} -- values register() took apart already

function M.register(...)
  local before = #list
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "string" and #v >= 4 and not seen_values[v] then
      seen_values[v] = true
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
        -- as a JSON string holds it (a secret with a quote or backslash)
        local escaped = json.encode(p):sub(2, -2)
        if escaped ~= p then add(escaped) end
        -- base64 forms of 6 characters or more: shorter ones would match
        -- inside any long base64 text (an encoded histogram) by chance
        for _, f in ipairs(b64_forms(p)) do add(f, 6) end
      end
    end
  end
  if #list > before then
    table.sort(list, function(a, b) return #a > #b end)
    cache, cached, key_kind, kinds = {}, 0, {}, 0
  end
end

--- secrets.registered() -> the number of registered texts (each secret
-- with its forms), for tests.
function M.registered()
  return #list
end

--- secrets.register_list() -> the registered texts, longest first: the
-- live list M.scrub replaces (kb.csv's C encoder scrubs its cells with it,
-- as M.scrub would). Read it; never change it.
function M.register_list()
  return list
end

--- base64 (either alphabet, padding optional) -> bytes, or nil.
M.b64decode = u.b64decode

--- secrets.scrub(text [, list]) -> text with every registered secret, and
-- every one of the list (4 characters or more; false and nil entries
-- skipped; registered by this call), replaced by "<redacted>", then the
-- pattern rules of kb_redact applied (URL userinfo "***", credential
-- query parameters and key=value pairs, headers, bearer tokens, JWTs, PEM
-- keys "[REDACTED]"). Non-strings pass through.
function M.scrub(text, secrets)
  if type(text) ~= "string" then return text end
  if secrets then M.register(table.unpack(secrets, 1, #secrets)) end
  local short = #text <= CACHE_LEN
  if short then
    local hit = cache[text]
    if hit then return hit end
  end
  local out = log.redact(text, list) -- the registered texts, then the pattern rules
  if short then
    if cached >= CACHE_MAX then cache, cached = {}, 0 end
    cache[text], cached = out, cached + 1
  end
  return out
end

-- Fields that must never be written: table -> {name = true} (M.protect).
local protected = setmetatable({}, { __mode = "k" })

-- Does a field of this name hold a credential? The pattern rules decide
-- (a key ending in token, password, secret, ...), so a table field and
-- the same pair in a log line are judged alike.
local credential_names = {}
local function credential_field(k, v)
  if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") or v == "" then return false end
  local known = credential_names[k]
  if known == nil then
    local pair = k .. "=v"
    known = log.redact(pair) ~= pair
    if #k <= CACHE_LEN then credential_names[k] = known end
  end
  return known
end

local function scrub_value(v, seen)
  if type(v) == "string" then return M.scrub(v) end
  if type(v) ~= "table" then return v end
  if seen[v] then return seen[v] end
  local out = {}
  seen[v] = out
  local hidden = protected[v]
  for k, x in pairs(v) do
    local key = type(k) == "string" and M.scrub(k) or k
    if hidden and hidden[k] and x ~= "" then
      out[key] = "<redacted>"
    elseif credential_field(k, x) then
      out[key] = "[REDACTED]"
    else
      out[key] = scrub_value(x, seen)
    end
  end
  local mt = getmetatable(v)
  if type(mt) == "table" then setmetatable(out, mt) end
  return out
end

-- Does v (or a table inside it) hold fields protected by M.protect?
local function reaches_protected(v, seen)
  if type(v) ~= "table" or seen[v] then return false end
  if protected[v] then return true end
  seen[v] = true
  for _, x in pairs(v) do
    if type(x) == "table" and reaches_protected(x, seen) then return true end
  end
  return false
end

-- A table of plain values (a journal record, a call's row) that scrubbing
-- would leave alone: it is not protected, holds no table, no field is
-- named like a credential and no string (key or value) changes under
-- M.scrub. Checked field by field, so the strings that repeat (keys, op
-- names, states) hit the scrubber's cache and the numbers, which hold no
-- secret, are not scanned at all: the journal's per-call lines no longer
-- pay a scrub of their whole, always new, text.
--
-- A key is judged once (key_kind): "plain" when scrubbing leaves it alone
-- and it is not named like a credential (clean whatever its value),
-- "credential" when its value decides. Forgotten when a secret is
-- registered, as the scrubber's cache is.
local function clean_key(k, x)
  local kind = key_kind[k]
  if kind == nil then
    if M.scrub(k) ~= k then return false end
    kind = credential_field(k, "v") and "credential" or "plain"
    if #k <= CACHE_LEN then
      if kinds >= CACHE_MAX then key_kind, kinds = {}, 0 end
      key_kind[k], kinds = kind, kinds + 1
    end
  end
  return kind == "plain" or not credential_field(k, x)
end

local function flat_and_clean(v)
  if type(v) ~= "table" or protected[v] or getmetatable(v) ~= nil then return false end
  for k, x in pairs(v) do
    local tx = type(x)
    if tx == "table" then return false end
    if type(k) == "string" and not clean_key(k, x) then return false end
    if tx == "string" and M.scrub(x) ~= x then return false end
  end
  return true
end

--- secrets.scrub_value(v) -> a copy of v with every string scrubbed
-- (M.scrub, keys too), the value of every field named like a credential
-- (token, password, secret, authorization, cookie, ... as kb_redact's
-- key rule) "[REDACTED]", and every field protected by M.protect
-- "<redacted>". Metatables (kb.json's array marks) are kept; v itself is
-- not changed. Non-tables: M.scrub(v).
function M.scrub_value(v)
  return scrub_value(v, {})
end

--- secrets.encode_json(v [, opts]) -> kb.json.encode(M.scrub_value(v),
-- opts): what the writers of config/params.json, result/result.json and
-- the journal encode with. The scrubber runs over the encoded text first;
-- only when it finds something (or a table protected by M.protect is
-- about) is the value scrubbed field by field and encoded again, so the
-- JSON stays valid (a header rule never swallows a closing quote).
function M.encode_json(v, opts)
  if flat_and_clean(v) then return json.encode(v, opts) end
  local text = json.encode(v, opts)
  if not reaches_protected(v, {}) and M.scrub(text) == text then return text end
  return json.encode(scrub_value(v, {}), opts)
end

--- secrets.protect(t, names): the fields `names` (a list) of table t are
-- secret: their values are registered (so they are scrubbed wherever they
-- appear, 4 characters or more) and M.scrub_value writes "<redacted>" for
-- them (kb.params does it for parameters declared `secret = true`).
function M.protect(t, names)
  local set = protected[t] or {}
  for _, name in ipairs(names) do
    set[name] = true
    if type(t[name]) == "string" then M.register(t[name]) end
  end
  protected[t] = set
end

--- secrets.params(declared) -> defaults, secret_names: a scenario's
-- parameter declarations with `{default = v, secret = true}` entries
-- turned into their default v; secret_names lists the parameters declared
-- secret (nil when none). Other values are defaults as they are.
function M.params(declared)
  if type(declared) ~= "table" then return declared, nil end
  local defaults, names
  for k, v in pairs(declared) do
    if type(v) == "table" and v.default ~= nil and getmetatable(v) == nil then
      for f in pairs(v) do
        if f ~= "default" and f ~= "secret" then
          error(string.format("parameter '%s': a declaration table takes default and secret, not '%s'",
            tostring(k), tostring(f)), 0)
        end
      end
      defaults = defaults or {}
      if v.secret then
        names = names or {}
        names[#names + 1] = k
      end
    end
  end
  if not defaults then return declared, nil end
  local plain = {}
  for k, v in pairs(declared) do
    plain[k] = (type(v) == "table" and v.default ~= nil and getmetatable(v) == nil) and v.default or v
  end
  if names then table.sort(names) end
  return plain, names
end

-- Header names whose values are credentials: the standard ones and
-- anything named like auth, a key, token, secret, session, password or
-- cookie ("kubeflow-userid" is an identity, not a secret).
local CREDENTIAL_HEADERS = { authorization = true, ["proxy-authorization"] = true, cookie = true }

local header_verdicts, n_verdicts = {}, 0 -- name -> credential_header's answer

--- secrets.credential_header(name) -> whether a header of this name carries
-- a credential (its value is registered before it is sent).
function M.credential_header(name)
  if type(name) ~= "string" then return false end
  local known = header_verdicts[name]
  if known ~= nil then return known end
  local n = name:lower()
  known = CREDENTIAL_HEADERS[n] or n:find("auth", 1, true) ~= nil or n:find("token", 1, true) ~= nil
    or n:find("secret", 1, true) ~= nil or n:find("key", 1, true) ~= nil
    or n:find("session", 1, true) ~= nil or n:find("password", 1, true) ~= nil
    or n:find("cookie", 1, true) ~= nil
  -- every request's headers pass here: names are few, answers kept (bounded)
  if n_verdicts >= CACHE_MAX then header_verdicts, n_verdicts = {}, 0 end
  header_verdicts[name], n_verdicts = known, n_verdicts + 1
  return known
end

--- secrets.register_headers(headers): registers the values of the
-- credential headers (M.credential_header) of a header table.
function M.register_headers(headers)
  if type(headers) ~= "table" then return end
  for k, v in pairs(headers) do
    if M.credential_header(k) and (type(v) == "string" or type(v) == "number") then M.register(tostring(v)) end
  end
end

-- kb.http's module functions register the credential headers a scenario
-- passes (kb.kfp, kb.k8s and kb.argo register theirs themselves), so a
-- server echoing a bare token is scrubbed whatever sent it. The methods of
-- a kb.http.client() are not wrapped.
do
  local ok, http = pcall(require, "kb.http")
  if ok and type(http) == "table" and not rawget(http, "registers_credentials") then
    -- the position of the options table in each function's arguments
    local OPTS = { get = 2, head = 2, delete = 2, post = 3, put = 3, patch = 3, request = 1, stream = 1 }
    for name, at in pairs(OPTS) do
      local f = http[name]
      if type(f) == "function" then
        http[name] = function(...)
          local opts = select(at, ...)
          if type(opts) == "table" and opts.headers then M.register_headers(opts.headers) end
          return f(...)
        end
      end
    end
    http.registers_credentials = true
  end
end

-- kb.log's leveled functions, with the registered secrets replaced before
-- the C logger (which applies the pattern rules) writes the line.
if not rawget(log, "scrubs_registered") then
  local format = string.format
  for _, level in ipairs({ "debug", "info", "warn", "error" }) do
    local write = log[level]
    log[level] = function(...)
      local n, fmt = select("#", ...), ...
      if n == 0 then error(format("bad argument #1 to 'kb.log.%s' (value expected)", level), 2) end
      if n > 1 and type(fmt) ~= "string" and type(fmt) ~= "number" then
        error(format("bad argument #1 to 'kb.log.%s' (string expected, got %s)", level, type(fmt)), 2)
      end
      if not log.enabled(level) then return end
      local msg
      if n > 1 then msg = format(...) else msg = tostring(fmt) end
      return write(log.replace_secrets(msg, list)) -- the C logger applies the patterns
    end
  end
  log.scrubs_registered = true
end

return M
