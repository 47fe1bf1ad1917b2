// RUN: md-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(md.model(md-mixed-precision))'

// expected-error @+1 {{'md.model' op buffer dtype 'bf16' is not supported: batch-norm statistics are all-reduced and kept in f32}}
md.model @bf16_buffer attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = bf16, buffer = bf16, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

md.model @no_step attributes {plan = #md.plan<name = "ddp", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = bf16, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<2xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{'md.train' op has no step program (run md-apply-plan first)}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

// expected-error @+1 {{'md.model' op needs a '#md.plan' and an 'md.train'}}
md.model @nothing {
}
