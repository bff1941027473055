-- Checks the folder an interrupted sweep left (run by
-- tests/e2e/sweep_interrupt.sh): `kbrun sweep_interrupt_check.lua dir=SWEEP`.
-- Each cell waits 10 virtual seconds 50 times and records each wait in
-- cell.wait; after its 5th it writes output/measuring. So a finished cell
-- holds 50 waits of exactly 10 s, an interrupted one that had written the
-- marker between 5 and 49, one without it fewer than 5. Raises (exit 1)
-- with every failed check listed.
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local journal = require "kb.journal"

local problems = {}
local function check(ok, fmt, ...)
  if not ok then problems[#problems + 1] = string.format(fmt, ...) end
end

local function waits(doc)
  for _, m in ipairs(doc.registry and doc.registry.metrics or {}) do
    if m.name == "cell.wait" then return m.summary end
  end
  return { count = 0 }
end

return {
  name = "sweep_interrupt_check",
  params = { dir = "" },
  run = function(p)
    local finished, counts = {}, { ok = 0, interrupted = 0, measured = 0 }
    local cells = 0
    for _, name in ipairs(fs.list(p.dir)) do
      if name:match("^c%d%d%d%-r1$") then
        cells = cells + 1
        local dir = fs.join(p.dir, name)
        local path = fs.join(dir, "result", "result.json")
        if not fs.exists(path) then
          check(false, "%s has no result/result.json", name)
        else
          local doc = json.decode(fs.read(path))
          local w = waits(doc)
          local marked = fs.exists(fs.join(dir, "output", "measuring"))
          check(doc.clock and doc.clock.mode == "events", "%s: clock %s, not events", name,
            doc.clock and tostring(doc.clock.mode))
          if doc.status == "ok" then
            counts.ok = counts.ok + 1
            finished[name:sub(1, 4)] = true
            check(w.count == 50 and w.min == 10 and w.max == 10, "%s: finished with %s waits (%s..%s s), not 50 of 10 s",
              name, tostring(w.count), tostring(w.min), tostring(w.max))
          elseif doc.status == "interrupted" then
            counts.interrupted = counts.interrupted + 1
            if marked then
              counts.measured = counts.measured + 1
              check(w.count >= 5 and w.count < 50 and w.min == 10 and w.max == 10,
                "%s: interrupted after its 5th wait but keeps %s waits (%s..%s s)", name, tostring(w.count),
                tostring(w.min), tostring(w.max))
            else
              check(w.count < 5, "%s: %d waits kept but no marker after the 5th", name, w.count)
            end
          else
            check(false, "%s: status %s", name, tostring(doc.status))
          end
        end
      end
    end
    check(counts.ok >= 2, "%d finished cells, expected at least 2", counts.ok)
    check(counts.measured >= 1, "no interrupted cell had measured (the Ctrl-C came after one had)")
    -- sweep.csv and the journal hold the finished cells, and only those
    local rows = csv.parse(fs.read(fs.join(p.dir, "sweep.csv")), { header = true })
    local in_csv = {}
    for _, r in ipairs(rows) do in_csv[r.id or r.cell] = true end
    local done = {}
    for _, rec in ipairs(journal.read(fs.join(p.dir, "journal.jsonl"))) do
      if rec.event == "done" then done[rec.id] = true end
    end
    for id in pairs(finished) do
      check(in_csv[id], "sweep.csv lacks the finished cell %s", id)
      check(done[id], "the journal lacks the finished cell %s", id)
    end
    for id in pairs(in_csv) do check(finished[id], "sweep.csv holds %s, which did not finish", id) end
    for id in pairs(done) do check(finished[id], "the journal has %s done, which did not finish", id) end
    if #problems > 0 then error(table.concat(problems, "\n"), 0) end
    print(string.format("%d cells: %d ok, %d interrupted (%d of them measuring)", cells, counts.ok,
      counts.interrupted, counts.measured))
  end,
}
