--- A post job that runs inside kbrun: parses the replicas' logs in output/
-- (what Kubebench's tf-cnn post-processor image did) into the result.
-- Understands tf_cnn_benchmarks ("total images/sec: 123.4"), the training
-- lines the simulator prints ("loss=0.04 accuracy=0.98", "training finished
-- in 12.3s") and generic "done in 12.3s" lines.
return function(ctx)
  local result = { replicas = 0 }
  local ips, seconds = 0, nil
  local names = {}
  for name in pairs(ctx.logs) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local text = ctx.logs[name]
    result.replicas = result.replicas + 1
    for v in text:gmatch("total images/sec:%s*([%d.]+)") do ips = ips + tonumber(v) end
    local loss = text:match("loss=([%d.]+)")
    local acc = text:match("accuracy=([%d.]+)")
    if loss then result.loss = tonumber(loss) end
    if acc then result.accuracy = tonumber(acc) end
    local s = text:match("training finished in ([%d.]+)s") or text:match("done in ([%d.]+)s")
    if s then seconds = math.max(seconds or 0, tonumber(s)) end
  end
  if ips > 0 then result.images_per_sec = ips end
  result.train_seconds = seconds
  return result
end
