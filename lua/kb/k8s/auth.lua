--- kb.k8s.auth: the credentials of a Kubernetes client, from a kubeconfig
-- user or a service account: a bearer token, a token file (re-read when its
-- mtime or size changes, as projected service account tokens rotate),
-- basic auth, or an exec credential plugin (client.authentication.k8s.io
-- v1 / v1beta1 ExecCredential, run through kb.process, its token or client
-- certificate cached until status.expirationTimestamp and refreshed after
-- a 401). Client certificates from the kubeconfig are TLS options and are
-- not handled here.
--
-- A provider keeps the secrets; callers get request headers and TLS
-- options, never the values for their own fields. Failures raise class
-- "auth" with messages that name the plugin or file, never a secret.
local kb = require "kb"
local core = require "kb.core"
local fs = require "kb.fs"
local secrets = require "kb.secrets"
local json = require "kb.json"
local log = require "kb.log"
local metrics = require "kb.metrics"
local u = require "kb.k8s.util"

local M = {}

local Provider = {}
Provider.__index = Provider
Provider.__name = "kb.k8s.auth"

function Provider:__tostring() return "kb.k8s.auth " .. (self.kind or "none") end

local function auth_error(fmt, ...)
  u.raise("auth", "kb.k8s: " .. string.format(fmt, ...))
end

local function reason_of(err)
  if type(err) == "table" then return err.reason or err.message or tostring(err) end
  return tostring(err)
end


--- A provider for cfg.auth (nil: no credentials). opts: exec_timeout
-- (seconds of real time a plugin may run, default 60).
function M.new(auth, opts)
  opts = opts or {}
  local p = setmetatable({ kind = auth and auth.kind, exec_timeout = opts.exec_timeout or 60 }, Provider)
  -- Secrets and the spec live in a closure-held table, not in fields.
  local s = { spec = auth or {} }
  p._s = setmetatable({}, { __index = s, __newindex = s, __metatable = "kb.k8s.auth secrets",
    __tostring = function() return "<secrets>" end })
  -- Every credential is registered with kb.secrets before it is sent, so
  -- a server that echoes one (or its base64) cannot put it in an error.
  if p.kind == "token" then
    s.token = auth.token
    secrets.register(s.token)
  elseif p.kind == "token_file" then
    s.path = auth.path
  elseif p.kind == "basic" then
    s.basic = u.b64encode(auth.username .. ":" .. auth.password)
    s.username = auth.username
    secrets.register("Basic " .. s.basic, auth.password)
  elseif p.kind == "exec" then
    s.lock = kb.semaphore(1)
  end
  return p
end

--- Whether the provider sends credentials (for the plain-http check).
function Provider:has_credentials()
  return self.kind ~= nil
end

-- The token of a token file, re-read when its mtime or size changed.
local function file_token(s)
  if not s.token then s.mtime = nil end -- first use: always read
  local fresh = secrets.refresh(s, s.path, auth_error, "token file")
  if fresh then
    secrets.register(fresh)
    s.token = fresh
  end
  return s.token
end

-- ---- exec plugins -------------------------------------------------------------

local function exec_info(spec)
  local info = { apiVersion = spec.api_version, kind = "ExecCredential",
    spec = { interactive = false } }
  if spec.provide_cluster_info and spec.cluster_info then info.spec.cluster = spec.cluster_info end
  return json.encode(info)
end

local function first_lines(text, n)
  local out = {}
  for line in tostring(text):gmatch("[^\n]+") do
    out[#out + 1] = line
    if #out == n then break end
  end
  return table.concat(out, " | ")
end

-- Runs the plugin; returns { token | cert_pem + key_pem, expires (epoch) }.
local function run_exec(p, spec)
  local name = spec.command
  if spec.interactive_mode == "Always" then
    auth_error("exec plugin '%s' requires a terminal (interactiveMode: Always) and kbrun "
      .. "runs without one; log in first or use a plugin mode that needs no input", name)
  end
  local env = {}
  for k, v in pairs(spec.env) do env[k] = v end
  env.KUBERNETES_EXEC_INFO = exec_info(spec)
  local cmd = { name }
  for _, a in ipairs(spec.args) do cmd[#cmd + 1] = a end
  local t0 = kb.now()
  -- kb.process timeouts are scenario seconds; a plugin runs in real time.
  local ok, r = pcall(kb.process.run, { cmd = cmd, env = env,
    timeout = p.exec_timeout * core.clock_speed() })
  if not ok then
    if kb.is_cancelled(r) then error(r, 0) end
    local hint = spec.install_hint and (" (" .. u.trim(spec.install_hint, 300) .. ")") or ""
    if type(r) == "table" and r.class == "timeout" then
      auth_error("exec plugin '%s' did not finish within %g s%s", name, p.exec_timeout, hint)
    end
    auth_error("exec plugin '%s' could not be run: %s%s", name, reason_of(r), hint)
  end
  metrics.histogram("k8s.exec_plugin"):record(r.time or (kb.now() - t0))
  if r.code ~= 0 then
    auth_error("exec plugin '%s' failed with exit code %d%s", name, r.code,
      r.stderr ~= "" and (": " .. u.trim(first_lines(r.stderr, 5), 400)) or "")
  end
  local okd, cred = pcall(json.decode, r.stdout)
  if not okd or type(cred) ~= "table" then
    -- Never quote stdout: it is meant to hold a credential.
    auth_error("exec plugin '%s' did not print an ExecCredential JSON object on stdout "
      .. "(%d bytes)", name, #r.stdout)
  end
  if cred.kind ~= "ExecCredential" then
    auth_error("exec plugin '%s' printed kind '%s', expected ExecCredential", name,
      tostring(cred.kind))
  end
  if cred.apiVersion ~= spec.api_version then
    auth_error("exec plugin '%s' printed apiVersion '%s', but the kubeconfig asks for '%s'",
      name, tostring(cred.apiVersion), spec.api_version)
  end
  local st = cred.status
  if type(st) ~= "table" then auth_error("exec plugin '%s' printed no status", name) end
  local out = {}
  if type(st.token) == "string" and st.token ~= "" then
    out.token = st.token
    secrets.register(out.token)
  elseif type(st.clientCertificateData) == "string" and type(st.clientKeyData) == "string" then
    out.cert_pem, out.key_pem = st.clientCertificateData, st.clientKeyData
  else
    auth_error("exec plugin '%s' printed neither status.token nor status.clientCertificateData "
      .. "with status.clientKeyData", name)
  end
  if st.expirationTimestamp ~= nil and st.expirationTimestamp ~= json.null then
    out.expires = u.parse_time(st.expirationTimestamp)
    if not out.expires then
      auth_error("exec plugin '%s' printed an invalid status.expirationTimestamp '%s'", name,
        tostring(st.expirationTimestamp))
    end
  end
  log.debug("kb.k8s: exec plugin '%s' gave a %s%s", name, out.token and "token" or
    "client certificate", out.expires and string.format(" valid until %s",
    u.format_time(out.expires)) or "")
  return out
end

local function exec_credential(p, s)
  local c = s.cred
  -- Wall clock: expiry is absolute, the scenario clock may be virtual.
  if c and (not c.expires or kb.time() < c.expires - 1) then return c end
  s.lock:acquire()
  local ok, err = pcall(function()
    c = s.cred
    if c and (not c.expires or kb.time() < c.expires - 1) then return end
    s.cred = nil
    s.cred = run_exec(p, s.spec)
  end)
  s.lock:release()
  if not ok then error(err, 0) end
  return s.cred
end

-- ---- the provider interface ---------------------------------------------------

--- Adds the credentials to a request: headers (a table to fill) and the
-- kb.http TLS options (cert_pem/key_pem of an exec plugin).
function Provider:apply(headers, tls)
  local s = self._s
  local kind = self.kind
  if kind == "token" then
    headers.Authorization = "Bearer " .. s.token
  elseif kind == "token_file" then
    headers.Authorization = "Bearer " .. file_token(s)
  elseif kind == "basic" then
    headers.Authorization = "Basic " .. s.basic
  elseif kind == "exec" then
    local c = exec_credential(self, s)
    if c.token then
      headers.Authorization = "Bearer " .. c.token
    else
      tls.cert_pem, tls.key_pem, tls.cert_file, tls.key_file = c.cert_pem, c.key_pem, nil, nil
    end
  end
end

--- After a 401: forgets cached credentials. True when a retry may succeed
-- (an exec plugin runs again; a token file is read again).
function Provider:invalidate()
  local s = self._s
  if self.kind == "exec" then
    s.cred = nil
    return true
  elseif self.kind == "token_file" then
    local old = s.token
    s.mtime, s.size, s.token = nil, nil, nil
    local ok, tok = pcall(file_token, s)
    return ok and tok ~= old
  end
  return false
end

--- What the credentials are, for messages (never a secret): "the token
-- file '/path'", "the exec plugin 'aws'", "basic auth (user 'alice')",
-- "a bearer token"; nil without credentials.
function Provider:describe()
  local s, kind = self._s, self.kind
  if kind == "token" then return "a bearer token" end
  if kind == "token_file" then return string.format("the token file '%s'", s.path) end
  if kind == "basic" then return string.format("basic auth (user '%s')", s.username) end
  if kind == "exec" then return string.format("the exec plugin '%s'", s.spec.command) end
  return nil
end

--- Secrets to redact from server messages.
function Provider:secrets()
  local s = self._s
  local list = {}
  for _, v in ipairs({ s.token or false, s.basic or false, s.cred and s.cred.token or false }) do
    if v and #v >= 4 then list[#list + 1] = v end
  end
  return list
end

return M
