// RUN: md-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(md.model(md-verify-collectives{final-program=true}))'

// At the end of md's pipeline, a collective under rank-varying control in
// the step program can only come from a pass: an internal error.
// The step program md's passes write must never branch on the rank: with
// final-program, a finding there is an internal error.
md.model @internal_error_in_step_program {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %g = arith.constant dense<1.0> : tensor<4xf32>
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      // expected-error @+2 {{internal error: a pass introduced a non-uniform collective: 'all_reduce avg' over group world is under a condition that differs between ranks}}
      // expected-note @+1 {{fix: run it on every rank}}
      %s = md.all_reduce %g avg group world : tensor<4xf32>
    }
  } hooks {
  }
}

// -----

// The user's hooks keep the user's wording in the final program.
md.model @user_error_in_hooks_of_final_program {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so ranks run this 'for' a different number of times}}
    md.for %i = %c0 to %r {
      // expected-error-re @+2 {{{{^}}'save checkpoint(sharded)' is in a loop whose trip count differs between ranks}}
      // expected-note @+1 {{fix: take the bounds of 'for'}}
      md.save sharded
    }
  }
}
