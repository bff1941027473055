-- kb.kfp.storm_record's journal line of a successful call: built from
-- parts on the storm's hot path, it must be what kb.secrets.encode_json
-- writes for the same record, byte for byte, or not be built at all.
local T = require "kb.testing"
local secrets = require "kb.secrets"
local record = require "kb.kfp.storm_record"

local call_line = record.call_line

local function general(op, start, latency, status)
  return secrets.encode_json{ event = "call", op = op, t = start, latency = latency, status = status }
end

T.case("a call's line is encode_json's, for random values", function()
  local ops = { "poll.run.get", "run.create", "run.delete", "kfp.run.get", 'we"ird\\op', "ünï.op" }
  math.randomseed(15)
  for i = 1, 5000 do
    local op = ops[i % #ops + 1]
    local start = math.random() * 10 ^ math.random(-3, 5)
    local latency = (math.random() ^ 4) * 10 ^ math.random(-7, 2)
    if i % 11 == 0 then latency = math.random(1, 5000) * 1e-6 end
    if i % 13 == 0 then start = 0.0 end
    local status = ({ 200, 201, 204, 299 })[i % 4 + 1]
    T.eq(call_line(op, start, latency, status), general(op, start, latency, status),
      string.format("op %s start %.17g latency %.17g", op, start, latency))
  end
end)

T.case("numbers that are not finite go the general way", function()
  T.eq(call_line("poll.run.get", 1.0, 0 / 0, 200), nil)
  T.eq(call_line("poll.run.get", math.huge, 0.1, 200), nil)
  T.eq(call_line("poll.run.get", 1.0, -math.huge, 200), nil)
end)

T.case("an op the scrubber would change goes the general way, also once registered later", function()
  local op = "poll.sekrit-op-name-4711.get"
  T.eq(call_line(op, 1.5, 0.25, 200), general(op, 1.5, 0.25, 200)) -- judged clean: cached
  secrets.register("sekrit-op-name-4711")
  T.eq(call_line(op, 1.5, 0.25, 200), nil, "judged again after the registration")
  T.ok(not general(op, 1.5, 0.25, 200):find("sekrit-op-name-4711", 1, true), "scrubbed")
end)
T.run()
