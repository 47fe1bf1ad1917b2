// RUN: md-opt %s -split-input-file -verify-diagnostics --md-plan-memory=world-size=2

// The evaluation's forward is sized like the step: a value whose size the
// analysis cannot tell (here the batch the evaluation reads) is an error on
// the md.evaluate.
md.model @evaluate_dynamic_batch {
  md.forward @forward(%x: tensor<?x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<?x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 32 micro_batch 16
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %s = md.step : i64
  } hooks {
    md.every 10 steps {
      // expected-error @+1 {{cannot size a value of type 'tensor<?x8xf32>' in the evaluation of the forward}}
      %v = md.evaluate @forward(#md.data<synthetic, "">) : tensor<f32>
      md.log "val"(%v : tensor<f32>)
    }
  }
}
