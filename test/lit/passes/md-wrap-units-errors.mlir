// RUN: md-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(md.model(md-wrap-units))'

// expected-error @+1 {{'md.model' op plan 'p' wraps blocks that match no parameter}}
md.model @m attributes {plan = #md.plan<name = "p", preset = "fsdp-full", shard = full, wrap = blocks(layers), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
  md.param @h.0.w : tensor<4x4xf32> init <zeros> unit 1
}
