--- kb.retry: the retry policy the API clients (kb.kfp, kb.k8s) share.
--
--   local retry = require "kb.retry"
--   local p = retry.policy{ max_attempts = 5, base = 0.2, max_delay = 10,
--     budget = { ratio = 0.2, min = 10 }, jitter = "full" }
--   local budget = p:budget()                     -- one per client
--   local doc, resp, info = p:run({ op = "run.get", method = "GET", budget = budget,
--     prefix = "kfp." }, function(attempt) return pcall(send_once) end)
--
-- What is retried: a transient failure (connection refused, reset, timed
-- out; HTTP 429, 502, 503, 504) of an idempotent request (GET, HEAD,
-- OPTIONS, PUT, DELETE; a watch is a GET). A request that is not idempotent
-- (a create) is re-sent blindly only when the server cannot have acted on
-- it: the connection was refused, or it answered 429. After any other
-- transient failure (a reset, a timeout, a 5xx: the server may have
-- created the object before the answer was lost) the caller's recover()
-- looks the object up by name first; when it exists it is the answer
-- (counted as recovered), else the request is sent again. Without a
-- recover() such a request is not retried.
--
-- Delays: the server's Retry-After on a 429 or 503 when it sends one
-- (delay-seconds or an HTTP-date, see retry.parse_retry_after; not
-- jittered, capped at max_delay, and a retry still takes a budget token),
-- else exponential backoff base * 2^(attempt-1) capped at max_delay, with
-- jitter "full" (uniform in [0, d]), "equal" (d/2 + uniform [0, d/2]) or
-- "none". Delays are kb.sleep()s: scenario seconds. kb.kfp, kb.k8s and
-- kb.argo put the parsed Retry-After in err.retry_after (retry.retry_after).
--
-- The budget keeps a failing server from being hammered: a token bucket per
-- client that starts with `min` tokens, gains `ratio` per logical request
-- (up to min + ratio * window) and loses one per retry; when it is empty
-- failures are raised at once and counted in
-- `<prefix>retry_budget_exhausted{op}`. Each retry counts in
-- `<prefix>retries{op, reason}` (reason: the status, e.g. "503", or the
-- transport class, e.g. "reset"), each recovered create in
-- `<prefix>recovered{op}`.
local kb = require "kb"
local core = require "kb.core"
local u = require "kb.k8s.util"
local metrics = require "kb.metrics"

local M = {}

M.DEFAULTS = {
  max_attempts = 5,   -- attempts per logical call, the first included
  base = 0.2,         -- seconds before the first retry (before jitter)
  max_delay = 10,     -- cap of one delay, Retry-After included
  jitter = "full",    -- "full", "equal" or "none"
  budget = { ratio = 0.2, min = 10, window = 100 },
}

--- HTTP statuses worth another attempt.
M.STATUSES = { [429] = true, [502] = true, [503] = true, [504] = true }

--- Transport failure classes (kb.http) worth another attempt.
M.CLASSES = { connect = true, reset = true, timeout = true }

--- Methods whose repetition has the effect of one call.
M.IDEMPOTENT = { GET = true, HEAD = true, OPTIONS = true, PUT = true, DELETE = true }

-- Failures after which the server cannot have acted on the request.
local function unprocessed(status, class)
  return status == 429 or (status == nil and class == "connect")
end

local JITTER = { full = true, equal = true, none = true }

local Policy = {}
Policy.__index = Policy
Policy.__name = "kb.retry.policy"

function Policy:__tostring()
  return string.format("kb.retry.policy{max_attempts = %d, base = %g, max_delay = %g, jitter = %s}",
    self.max_attempts, self.base, self.max_delay, self.jitter)
end

local function usage(fmt, ...)
  error("kb.retry.policy: " .. string.format(fmt, ...), 3)
end

local function number_opt(v, name, min, integer)
  if type(v) ~= "number" or v ~= v or v < min or (integer and math.tointeger(v) == nil) then
    usage("%s must be %s >= %g, got %s", name, integer and "an integer" or "a number", min,
      tostring(v))
  end
  return integer and math.tointeger(v) or v
end

local function check_budget(b)
  if b == false then return false end
  if type(b) ~= "table" then usage("budget must be a table {ratio =, min =, window =} or false") end
  local d = M.DEFAULTS.budget
  for k in pairs(b) do
    if d[k] == nil then usage("unknown budget option '%s'", tostring(k)) end
  end
  return {
    ratio = number_opt(b.ratio == nil and d.ratio or b.ratio, "budget.ratio", 0),
    min = number_opt(b.min == nil and d.min or b.min, "budget.min", 0),
    window = number_opt(b.window == nil and d.window or b.window, "budget.window", 1),
  }
end

--- retry.policy([opts]) -> a policy. opts (each optional, defaults in
-- retry.DEFAULTS): max_attempts (1 = no retries), base, max_delay, jitter,
-- budget ({ratio, min, window} or false for no budget).
function M.policy(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then usage("takes a table of options") end
  if getmetatable(opts) == Policy then return opts end
  local d = M.DEFAULTS
  for k in pairs(opts) do
    if d[k] == nil then usage("unknown option '%s'", tostring(k)) end
  end
  local jitter = opts.jitter == nil and d.jitter or opts.jitter
  if not JITTER[jitter] then usage("jitter must be \"full\", \"equal\" or \"none\", got %s", tostring(jitter)) end
  local p = setmetatable({
    max_attempts = number_opt(opts.max_attempts == nil and d.max_attempts or opts.max_attempts,
      "max_attempts", 1, true),
    base = number_opt(opts.base == nil and d.base or opts.base, "base", 0),
    max_delay = number_opt(opts.max_delay == nil and d.max_delay or opts.max_delay, "max_delay", 0),
    jitter = jitter,
    budget_spec = check_budget(opts.budget == nil and d.budget or opts.budget),
  }, Policy)
  return p
end

--- retry.resolve(v) -> a policy or nil: v nil or true gives the default
-- policy, false nil (no retries), a table a policy of those options.
function M.resolve(v, who)
  if v == nil or v == true then return M.policy() end
  if v == false then return nil end
  if type(v) ~= "table" then
    error(string.format("%s: retry must be a kb.retry.policy, a table of its options, true or "
      .. "false, got %s", who or "kb.retry", type(v)), 3)
  end
  return M.policy(v)
end

-- ---- the budget --------------------------------------------------------------------

local Budget = {}
Budget.__index = Budget
Budget.__name = "kb.retry.budget"

function Budget:__tostring()
  return string.format("kb.retry.budget %.1f of %.1f tokens", self.tokens, self.cap)
end

--- budget:deposit(): a logical request adds `ratio` tokens.
function Budget:deposit()
  self.tokens = math.min(self.cap, self.tokens + self.ratio)
end

--- budget:withdraw() -> true when a retry may go ahead (takes one token).
function Budget:withdraw()
  if self.tokens < 1 then return false end
  self.tokens = self.tokens - 1
  return true
end

--- policy:budget() -> a fresh budget (nil when the policy has none).
function Policy:budget()
  local b = self.budget_spec
  if not b then return nil end
  return setmetatable({ ratio = b.ratio, tokens = b.min, cap = b.min + b.ratio * b.window }, Budget)
end

-- ---- classification ----------------------------------------------------------------

-- ---- Retry-After ---------------------------------------------------------------------

--- Statuses whose Retry-After says when to come back (RFC 9110 10.2.3:
-- 503, and 429 by RFC 6585). On a 3xx it is a redirect's pause, not ours.
M.RETRY_AFTER_STATUSES = { [429] = true, [503] = true }

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8,
  Sep = 9, Oct = 10, Nov = 11, Dec = 12 }
local DAY_NAMES = { Mon = true, Tue = true, Wed = true, Thu = true, Fri = true, Sat = true,
  Sun = true }
local LONG_DAY_NAMES = { Monday = true, Tuesday = true, Wednesday = true, Thursday = true,
  Friday = true, Saturday = true, Sunday = true }

local function days_in_month(y, m)
  if m == 2 then return (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28 end
  return (m == 4 or m == 6 or m == 9 or m == 11) and 30 or 31
end

--- retry.parse_http_date(text [, now]) -> epoch seconds (UTC), or nil
-- when text is not an HTTP-date. The three forms of RFC 9110 5.6.7, case
-- as the grammar has it: IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", the
-- obsolete RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT" (a two-digit year more
-- than 50 years after `now`'s year, default the wall clock, is the last
-- such year in the past) and asctime "Sun Nov  6 08:49:37 1994".
function M.parse_http_date(text, now)
  if type(text) ~= "string" then return nil end
  text = text:match("^[ \t]*(.-)[ \t]*$")
  local wd, d, mon, y, h, mi, s = text:match(
    "^(%a%a%a), (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
  local two_digit = false
  if wd then
    if not DAY_NAMES[wd] then return nil end
  else
    wd, d, mon, y, h, mi, s = text:match(
      "^(%a+), (%d%d)%-(%a%a%a)%-(%d%d) (%d%d):(%d%d):(%d%d) GMT$")
    if wd then
      if not LONG_DAY_NAMES[wd] then return nil end
      two_digit = true
    else
      wd, mon, d, h, mi, s, y = text:match(
        "^(%a%a%a) (%a%a%a) ([ %d]%d) (%d%d):(%d%d):(%d%d) (%d%d%d%d)$")
      if not wd or not DAY_NAMES[wd] then return nil end
    end
  end
  local m = MONTHS[mon]
  if not m then return nil end
  y, d, h, mi, s = tonumber(y), tonumber((d:gsub(" ", ""))), tonumber(h), tonumber(mi), tonumber(s)
  if two_digit then
    local this_year = tonumber(os.date("!%Y", math.floor(now or kb.time())))
    y = this_year - this_year % 100 + y
    if y > this_year + 50 then y = y - 100 end
  end
  -- second 60: a leap second (the grammar allows it)
  if d < 1 or d > days_in_month(y, m) or h > 23 or mi > 59 or s > 60 then return nil end
  return u.days_from_civil(y, m, d) * 86400 + h * 3600 + mi * 60 + s
end

--- retry.parse_retry_after(value [, date [, now]]) -> seconds to wait
-- (>= 0) and the form ("seconds" or "date"), or nil when value is
-- neither. value: delay-seconds ("120"; a fraction such as "0.5" is
-- accepted too) or an HTTP-date, which
-- is measured from `date` (the answer's Date header: the server's own
-- clock, so a skewed client clock does not matter) when that parses, else
-- from `now` (epoch seconds, default the wall clock kb.time()). A date in
-- the past means 0.
function M.parse_retry_after(value, date, now)
  if type(value) == "number" then
    if value >= 0 and value < math.huge then return value, "seconds" end
    return nil
  end
  if type(value) ~= "string" then return nil end
  local v = value:match("^[ \t]*(.-)[ \t]*$")
  if v:match("^%d+$") or v:match("^%d+%.%d+$") then return tonumber(v), "seconds" end
  local at = M.parse_http_date(v, now)
  if not at then return nil end
  local from = M.parse_http_date(date, now) or now or kb.time()
  return math.max(0, at - from), "date"
end

--- retry.retry_after(status, headers) -> scenario seconds to wait, or
-- nil: the Retry-After of a 429 or 503 answer (headers with lower-case
-- names, as kb.http gives them). An HTTP-date is wall-clock time: its
-- distance is scaled to the scenario clock (x speed against the
-- simulator); delay-seconds are taken as scenario seconds, as the
-- simulator sends them.
function M.retry_after(status, headers)
  if not M.RETRY_AFTER_STATUSES[math.tointeger(tonumber(status)) or -1] then return nil end
  if type(headers) ~= "table" then return nil end
  local v = headers["retry-after"]
  if type(v) ~= "string" then return nil end
  local secs, form = M.parse_retry_after(v, headers["date"])
  if form == "date" then secs = secs * core.clock_speed() end
  return secs
end

-- The server's delay of a failure: err.retry_after (set by the clients),
-- else the Retry-After of a response {status, headers}.
local function retry_after(x)
  local v = x.retry_after
  if v == nil then return M.retry_after(x.status, x.headers) end
  v = tonumber(v)
  if v and v >= 0 and v == v then return v end
  return nil
end

--- policy:backoff(attempt) -> the delay after failed attempt `attempt`
-- (1 for the first) without a Retry-After: jittered exponential backoff.
function Policy:backoff(attempt)
  local d = math.min(self.max_delay, self.base * 2 ^ (attempt - 1))
  if self.jitter == "full" then return d * math.random() end
  if self.jitter == "equal" then return d / 2 + d / 2 * math.random() end
  return d
end

--- policy:classify(err_or_response, method [, attempt]) -> retryable,
-- delay, reason, check. err_or_response is a kb error object (with class,
-- and status / retry_after for HTTP errors) or a kb.http response
-- ({status, headers}). reason labels the failure ("503", "reset", ...; nil
-- when it is not transient). retryable is true when the request may be
-- sent again as it is; check is true when it is transient but the request
-- is not idempotent and the server may have acted on it (look before
-- re-sending). delay: Retry-After (capped at max_delay) or the backoff.
function Policy:classify(x, method, attempt)
  if type(x) ~= "table" or kb.is_cancelled(x) then return false, nil, nil, false end
  local status = math.tointeger(tonumber(x.status))
  local reason
  if status then
    if M.STATUSES[status] then reason = tostring(status) end
  elseif M.CLASSES[x.class] then
    reason = x.class
  end
  if not reason then return false, nil, nil, false end
  local delay = retry_after(x)
  if delay then delay = math.min(delay, self.max_delay) else delay = self:backoff(attempt or 1) end
  method = tostring(method or "GET"):upper()
  if M.IDEMPOTENT[method] or unprocessed(status, x.class) then
    return true, delay, reason, false
  end
  return false, delay, reason, true
end

local default_policy

--- retry.classify(err_or_response, method [, attempt]): classify with the
-- default policy.
function M.classify(x, method, attempt)
  default_policy = default_policy or M.policy()
  return default_policy:classify(x, method, attempt)
end

-- ---- running a call ---------------------------------------------------------------

local function count(prefix, name, labels)
  metrics.counter(prefix .. name, labels):inc()
end

--- policy:run(ctx, attempt_fn) -> the results of the successful attempt
-- (up to two values), then info {attempts, slept, recovered}.
-- attempt_fn(n) makes attempt n and returns true, a, b or false, err (as
-- pcall does). ctx: op (metric label), method, budget (policy:budget() of
-- the client, or nil), prefix (of the counters, e.g. "kfp."), recover (for
-- a request that is not idempotent: a function(err) returning the object
-- when the failed request created it, else nil), first_error (the error of
-- an attempt 1 the caller made itself, budget deposit included: the loop
-- goes on from there). Raises the last error
-- when the failure is not transient, attempts or budget are used up, or
-- the call was cancelled; the error gains .attempts.
function Policy:run(ctx, attempt_fn)
  local budget, prefix, op = ctx.budget, ctx.prefix or "", ctx.op
  local first_error = ctx.first_error
  if budget and first_error == nil then budget:deposit() end
  local info = { attempts = 0, slept = 0, recovered = false }
  while true do
    info.attempts = info.attempts + 1
    local ok, a, b
    if info.attempts == 1 and first_error ~= nil then
      ok, a = false, first_error
    else
      ok, a, b = attempt_fn(info.attempts)
    end
    if ok then return a, b, info end
    local err = a
    local retryable, delay, reason, check = self:classify(err, ctx.method, info.attempts)
    local last = info.attempts >= self.max_attempts
    local look = check and ctx.recover ~= nil
    if not (retryable or look) or (last and not look) then
      if type(err) == "table" and not kb.is_cancelled(err) then err.attempts = info.attempts end
      error(err, 0)
    end
    if budget and not budget:withdraw() then
      count(prefix, "retry_budget_exhausted", { op = op })
      err.attempts, err.budget_exhausted = info.attempts, true
      error(err, 0)
    end
    kb.sleep(delay)
    info.slept = info.slept + delay
    if look then
      -- The server may have created the object before the answer was lost.
      local okr, found = pcall(ctx.recover, err)
      if okr and found ~= nil then
        count(prefix, "recovered", { op = op })
        info.recovered = true
        return found, nil, info
      end
      if not okr and kb.is_cancelled(found) then error(found, 0) end
      if last or not okr then
        err.attempts = info.attempts
        if not okr then
          err.recover_error = type(found) == "table" and (found.message or tostring(found))
            or tostring(found)
        end
        error(err, 0)
      end
    end
    count(prefix, "retries", { op = op, reason = reason })
  end
end

M.Policy, M.Budget = Policy, Budget

return M
