--- A run storm at a rate, for tests/lua/test_storm_rate.lua: the storm's
-- steps as scenarios/taxi_50runs.lua takes them, and, before cleanup, the
-- simulator's own list of the experiment's runs (result.truth: the ground
-- truth the storm's counts are checked against).
local storm = require "kb.kfp.storm"

local session

return {
  name = "storm_rate_driver",
  params = storm.params { num_runs = 1, run_status_polling_interval_sec = 10, scrape_metrics = false,
    progress = false },
  run = function(p)
    session = storm.new(p, { name = "storm_rate_driver" })
    local s = session
    s:create_pipeline()
    s:create_experiment()
    s:create_runs()
    s:wait_runs()
    local listed = s.aux:list_all_runs { experiment_id = s.experiment.id, page_size = 200 }
    local truth = { listed = #listed, by_state = {} }
    for _, r in ipairs(listed) do truth.by_state[r.state or "?"] = (truth.by_state[r.state or "?"] or 0) + 1 end
    s:cleanup()
    local result = s:finish()
    result.truth = truth
    return result
  end,
  cleanup = function()
    if session then
      session:cleanup()
      return session:finish()
    end
  end,
}
