--- A post job that runs inside kbrun: parses the replicas' logs in output/
-- (what Kubebench's tf-cnn post-processor image did) into the result.
-- Understands tf_cnn_benchmarks ("total images/sec: 123.4", summed over
-- the replicas), the training lines the simulator prints ("epoch 3/3 done,
-- loss=0.04 accuracy=0.98": the last epoch's loss and accuracy, and the
-- number of epochs; "training finished in 12.3s") and generic "done in
-- 12.3s" lines.
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
    -- the last epoch's figures, and how many epochs the replica logged
    local epochs = 0
    for loss, acc in text:gmatch("epoch %d+/%d+ done, loss=([%d.]+) accuracy=([%d.]+)") do
      epochs = epochs + 1
      result.loss, result.accuracy = tonumber(loss), tonumber(acc)
    end
    if epochs > 0 then result.epochs = math.max(result.epochs or 0, epochs) end
    local s = text:match("training finished in ([%d.]+)s") or text:match("done in ([%d.]+)s")
    if s then seconds = math.max(seconds or 0, tonumber(s)) end
  end
  if ips > 0 then result.images_per_sec = ips end
  result.train_seconds = seconds
  return result
end
