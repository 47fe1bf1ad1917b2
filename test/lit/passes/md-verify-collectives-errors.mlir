// RUN: md-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(md.model(md-verify-collectives))'

// Every way DOMAIN.md's desync shapes can reach the IR, each rejected with
// the chain from the varying source to the control op and a fix. The safe
// twins are in md-verify-collectives.mlir.

// Shape 1, direct: a full checkpoint under `rank == 0`; the other ranks
// never join its gather.
md.model @save_full_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      // expected-error @+2 {{'save checkpoint(full)' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in its gather of the parameters to rank 0}}
      // expected-note @+1 {{fix: move 'save checkpoint(full)' out of the rank condition: md writes the file on rank 0 only}}
      md.save full "ckpt"
    }
  }
}

// -----

// Shape 1, in the else branch: a metric all-reduce that only ranks != 0 run.
md.model @all_reduce_in_else_of_local_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'local_rank' differs between ranks}}
    %r = md.local_rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      md.print "local rank 0"
    } else {
      // expected-error @+2 {{'max(...)' (an all-reduce over every rank) is under a condition that differs between ranks: the ranks that skip it leave the others waiting in it}}
      // expected-note @+1 {{fix: compute it on every rank before the condition ('m = mean(loss)') and use the result inside it}}
      %m = md.all_reduce %l max group world : tensor<f32>
      md.log "max"(%m : tensor<f32>)
    }
  }
}

// -----

// Shape 2, one call deep: the collective hides in a user function.
md.model @call_one_deep_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @sync(%t: tensor<f32>) -> tensor<f32> {
    // expected-note @+1 {{'@sync' runs 'all_reduce sum' over group world here}}
    %s = md.all_reduce %t sum group world : tensor<f32>
    md.return %s : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      // expected-error @+2 {{the call to '@sync' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in 'all_reduce sum' over group world inside it}}
      // expected-note @+1 {{fix: call '@sync' on every rank; put only pure side effects (log, print) under the rank condition}}
      %s = md.call @sync(%l) : (tensor<f32>) -> tensor<f32>
    }
  }
}

// -----

// Shape 2, two calls deep: the notes name the call path.
md.model @call_two_deep_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @inner() {
    // expected-note @+1 {{'@outer' calls '@inner', which runs 'barrier' over group world here}}
    md.barrier group world
    md.return
  }
  md.func @outer() {
    md.print "syncing"
    md.call @inner() : () -> ()
    md.return
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c1 = arith.constant 1 : i64
    // expected-note @+1 {{so does this comparison}}
    %big = arith.cmpi sgt, %r, %c1 : i64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %big {
      // expected-error @+2 {{the call to '@outer' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in 'barrier' over group world inside it}}
      // expected-note @+1 {{fix: call '@outer' on every rank}}
      md.call @outer() : () -> ()
    }
  }
}

// -----

// Shape 2: a sharded checkpoint inside a function, called under the rank.
md.model @call_to_save_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @checkpoint() {
    // expected-note @+1 {{'@checkpoint' runs 'save checkpoint(sharded)' here}}
    md.save sharded "ckpt"
    md.return
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    md.every 100 steps {
      // expected-note @+1 {{so ranks disagree about this 'if'}}
      md.if %is0 {
        // expected-error @+2 {{the call to '@checkpoint' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in 'save checkpoint(sharded)' inside it}}
        // expected-note @+1 {{fix: call '@checkpoint' on every rank}}
        md.call @checkpoint() : () -> ()
      }
    }
  }
}

// -----

// Shape 4 across a call: the branch is inside the callee, on an argument
// that is the local loss at the call site.
md.model @branch_in_callee_on_local_loss {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @maybe_reduce(%high: i1, %t: tensor<f32>) {
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %high {
      // expected-error @+2 {{'all_reduce avg' over group world is under a condition that differs between ranks}}
      // expected-note @+1 {{fix: branch on 'mean(loss)' instead of 'loss': every rank computes the same value}}
      %m = md.all_reduce %t avg group world : tensor<f32>
    }
    md.return
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'loss' is this rank's own loss, before any reduction}}
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %high = arith.cmpf ogt, %v, %c3 : f32
    // expected-note @+1 {{and is passed to '@maybe_reduce' as argument #0 here}}
    md.call @maybe_reduce(%high, %l) : (i1, tensor<f32>) -> ()
  }
}

// -----

// Shape 4 in the forward: a branch on this rank's data around an all-reduce
// (a hand-written SyncBatchNorm that skips small batches).
md.model @forward_branch_on_data {
  // expected-note @+1 {{argument #0 of the forward is this rank's own micro-batch}}
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    // expected-note @+1 {{so does this 'md.mean'}}
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c0 = arith.constant 0.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %pos = arith.cmpf ogt, %v, %c0 : f32
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    %r = md.if %pos -> (tensor<f32>) {
      // expected-error @+2 {{'all_reduce avg' over group world is under a condition that differs between ranks}}
      // expected-note @+1 {{fix: reduce the value over ranks first}}
      %m = md.all_reduce %l avg group world : tensor<f32>
      md.yield %m : tensor<f32>
    } else {
      md.yield %l : tensor<f32>
    }
    md.return %r : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

// Shape 7: a parameter used under a branch on this rank's data; the ranks
// would disagree about which parameters get gradients.
md.model @parameter_under_data_branch {
  md.param @w : tensor<4xf32> init <zeros> unit 0
  // expected-note @+1 {{argument #0 of the forward is this rank's own micro-batch}}
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    // expected-note @+1 {{so does this 'md.mean'}}
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c0 = arith.constant 0.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %pos = arith.cmpf ogt, %v, %c0 : f32
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    %r = md.if %pos -> (tensor<2x4xf32>) {
      // expected-error @+2 {{parameter '@w' is used on some ranks only: the ranks would disagree about which parameters get gradients}}
      // expected-note @+1 {{fix: use every parameter on every rank}}
      %w = md.param_ref @w : tensor<4xf32>
      %y = md.mul %x, %w : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
      md.yield %y : tensor<2x4xf32>
    } else {
      md.yield %x : tensor<2x4xf32>
    }
    %m = md.mean %r dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %m : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

// Shape 3: evaluation in a loop of `rank` iterations.
md.model @evaluate_in_rank_loop {
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
      // expected-error @+2 {{'evaluate(...)' is in a loop whose trip count differs between ranks: the ranks that run it fewer times leave the others waiting in its all-reduce of the loss}}
      // expected-note @+1 {{fix: take the bounds of 'for' from 'step', 'world_size' or numbers, which every rank agrees on}}
      %e = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    }
  }
}

// -----

// Shape 3, one call deep: generation until a data-dependent length, in a
// function the forward calls.
md.model @gather_in_loop_with_data_bound {
  md.func @generate(%n: i64, %t: tensor<4xf32>) {
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so ranks run this 'for' a different number of times}}
    md.for %i = %c0 to %n {
      // expected-error @+2 {{'all_gather' over group world is in a loop whose trip count differs between ranks}}
      // expected-note @+1 {{fix: take the bounds of 'for'}}
      %g = md.all_gather %t group world : tensor<4xf32> -> tensor<?xf32>
    }
    md.return
  }
  // expected-note @+1 {{argument #0 of the forward is this rank's own micro-batch}}
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    // expected-note @+1 {{so does this 'md.mean'}}
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    // expected-note @+1 {{so does this arithmetic}}
    %n = arith.fptosi %v : f32 to i64
    %row = md.mean %x dims [0] : tensor<2x4xf32> to tensor<4xf32>
    // expected-note @+1 {{and is passed to '@generate' as argument #0 here}}
    md.call @generate(%n, %row) : (i64, tensor<4xf32>) -> ()
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

// -----

// Shape 3 inside `every`: a rank-long loop of all-reduces every 10 steps.
md.model @all_reduce_loop_inside_every {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    md.every 10 steps {
      // expected-note @+1 {{'rank' differs between ranks}}
      %r = md.rank : i64
      %c1 = arith.constant 1 : i64
      // expected-note @+1 {{so does this arithmetic}}
      %n = arith.addi %r, %c1 : i64
      %l = md.loss : tensor<f32>
      // expected-note @+1 {{so ranks run this 'for' a different number of times}}
      md.for %i = %c1 to %n {
        // expected-error @+2 {{'mean(...)' (an all-reduce over every rank) is in a loop whose trip count differs between ranks}}
        // expected-note @+1 {{fix: take the bounds of 'for'}}
        %m = md.all_reduce %l avg group world : tensor<f32>
      }
    }
  }
}

// -----

// Shape 4: a wall-clock `every` entered on some ranks only still broadcasts.
md.model @timed_every_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      // expected-error @+2 {{'every 10 minutes' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in its broadcast of rank 0's decision}}
      // expected-note @+1 {{fix: put the rank condition inside the 'every', around its pure side effects}}
      md.every 10 minutes {
        md.print "ten minutes"
      }
    }
  }
}

// -----

// Shape 4: the wall clock itself, around evaluation.
md.model @evaluate_after_wall_clock {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'time()' reads this rank's clock, and no two clocks agree exactly}}
    %t = md.wall_time : f64
    %hour = arith.constant 3600.0 : f64
    // expected-note @+1 {{so does this comparison}}
    %late = arith.cmpf ogt, %t, %hour : f64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %late {
      // expected-error @+2 {{'evaluate(...)' is under a condition that differs between ranks}}
      // expected-note @+1 {{fix: use 'every N minutes', which rank 0 decides and broadcasts, not a wall-clock comparison (or compare 'max(time())', which is the same on every rank)}}
      %e = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    }
  }
}

// -----

// Shape 5 and 8: rank 0 decides to stop and does not tell the others; the
// notes name what the others then wait in.
md.model @stop_on_rank_then_save {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-note @+1 {{the ranks that did not stop wait in the next step's collectives for the ones that did}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %is0 {
      // expected-error @+2 {{'stop' is under a condition that differs between ranks: the ranks that stop leave the others waiting in their next collective}}
      // expected-note @+1 {{fix: stop on a condition every rank agrees on, such as 'if mean(loss) > 10.0 { stop }' or 'if step >= 10000 { stop }'}}
      md.exit "rank 0 is done"
    }
    // expected-note @+1 {{after it, 'save checkpoint(sharded)' may run on some ranks only}}
    md.save sharded
  }
}

// -----

// Shape 5, one call deep: a function that stops, called on a wall-clock
// condition.
md.model @call_that_stops_on_wall_clock {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @quit() {
    // expected-note @+1 {{'@quit' stops training here}}
    md.exit "out of time"
    md.return
  }
  // expected-note @+1 {{the ranks that did not stop wait in the next step's collectives}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'time()' reads this rank's clock}}
    %t = md.wall_time : f64
    %hour = arith.constant 3600.0 : f64
    // expected-note @+1 {{so does this comparison}}
    %late = arith.cmpf ogt, %t, %hour : f64
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %late {
      // expected-error @+2 {{the call to '@quit' is under a condition that differs between ranks, and '@quit' stops training: the ranks that stop leave the others waiting in their next collective}}
      // expected-note @+1 {{fix: use 'every N minutes'}}
      md.call @quit() : () -> ()
    }
  }
}

// -----

// Shape 5: a STOP file seen by some ranks only, inside `every`.
md.model @stop_on_file_inside_every {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-note @+1 {{the ranks that did not stop wait in the next step's collectives}}
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    md.every 50 steps {
      // expected-note @+1 {{'exists("STOP")' looks at this rank's own file system}}
      %e = md.file_exists "STOP" : i1
      // expected-note @+1 {{so ranks disagree about this 'if'}}
      md.if %e {
        // expected-error @+2 {{'stop' is under a condition that differs between ranks}}
        // expected-note @+1 {{fix: reduce the file test over ranks: 'any(exists(...))' holds on every rank when the file is visible on some rank, 'all(...)' when on every rank}}
        md.exit
      }
    }
    md.every 100 steps {
      // expected-note @+1 {{after it, 'evaluate(...)' may run on some ranks only}}
      %v = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    }
  }
}

// -----

// Shape 6: a tensor sized by the rank; the ranks would exchange different
// numbers of elements.
md.model @all_reduce_of_rank_sized_tensor {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    // expected-note @+1 {{so does this arithmetic}}
    %n = arith.index_cast %r : i64 to index
    // expected-note @+1 {{so does this 'tensor.empty'}}
    %t = tensor.empty(%n) : tensor<?xf32>
    // expected-error @+2 {{the operand of 'all_reduce sum' over group world has a shape that differs between ranks (tensor<?xf32>): every rank must pass the same number of elements}}
    // expected-note @+1 {{fix: give the operand a static shape, or one that depends only on the world size (as md's flat shards do)}}
    %s = md.all_reduce %t sum group world : tensor<?xf32>
  }
}

// -----

// Shape 6, one call deep: the varying shape reaches the collective through
// a function argument.
md.model @shape_through_call {
  md.func @reduce(%t: tensor<?xf32>) {
    // expected-error @+2 {{the operand of 'all_reduce max' over group world has a shape that differs between ranks (tensor<?xf32>)}}
    // expected-note @+1 {{fix: give the operand a static shape}}
    %g = md.all_reduce %t max group world : tensor<?xf32>
    md.return
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'local_rank' differs between ranks}}
    %r = md.local_rank : i64
    // expected-note @+1 {{so does this arithmetic}}
    %n = arith.index_cast %r : i64 to index
    // expected-note @+1 {{so does this 'tensor.empty'}}
    %t = tensor.empty(%n) : tensor<?xf32>
    // expected-note @+1 {{and is passed to '@reduce' as argument #0 here}}
    md.call @reduce(%t) : (tensor<?xf32>) -> ()
  }
}

// -----

// Shape 6: a branch on the local loss picks between two sizes.
md.model @shape_from_varying_branch {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'loss' is this rank's own loss, before any reduction}}
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %high = arith.cmpf ogt, %v, %c3 : f32
    // expected-note @+1 {{so does the result of this 'if'}}
    %t = md.if %high -> (tensor<?xf32>) {
      %a = tensor.empty() : tensor<2xf32>
      %ad = tensor.cast %a : tensor<2xf32> to tensor<?xf32>
      md.yield %ad : tensor<?xf32>
    } else {
      %b = tensor.empty() : tensor<3xf32>
      %bd = tensor.cast %b : tensor<3xf32> to tensor<?xf32>
      md.yield %bd : tensor<?xf32>
    }
    // expected-error @+2 {{the operand of 'broadcast' over group world has a shape that differs between ranks (tensor<?xf32>)}}
    // expected-note @+1 {{fix: give the operand a static shape}}
    %s = md.broadcast %t root 0 group world : tensor<?xf32>
  }
}

// -----

// A reduction over a sub-group is uniform within the group only: on a
// hybrid mesh two shard groups can disagree about the branch.
md.model @branch_on_shard_group_reduction attributes {shard_group_size = 2 : i64} {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'loss' is this rank's own loss, before any reduction}}
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so does this 'md.all_reduce'}}
    %m = md.all_reduce %l avg group shard : tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %m[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %high = arith.cmpf ogt, %v, %c3 : f32
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %high {
      // expected-error @+2 {{'save checkpoint(full)' is under a condition that differs between ranks}}
      // expected-note @+1 {{fix: branch on 'mean(loss)' instead of 'loss'}}
      md.save full
    }
  }
}

// -----

// Another region op (scf.if) is judged by its operands.
md.model @scf_if_on_rank {
  md.func @f(%t: tensor<f32>) {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so does this comparison}}
    %is0 = arith.cmpi eq, %r, %c0 : i64
    // expected-note @+1 {{so ranks disagree about this 'scf.if'}}
    scf.if %is0 {
      // expected-error @+2 {{'all_reduce sum' over group world is under 'scf.if', which depends on a value that differs between ranks: the ranks that skip it leave the others waiting in it}}
      // expected-note @+1 {{fix: run it on every rank; put only pure side effects (log, print) under the rank condition}}
      %s = md.all_reduce %t sum group world : tensor<f32>
    }
    md.return
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.call @f(%l) : (tensor<f32>) -> ()
    md.return %l : tensor<f32>
  }
}

// -----

// Shape 3, two calls deep: the rank reaches a loop bound through two calls.
md.model @loop_bound_two_calls_deep {
  md.func @inner(%n: i64, %t: tensor<f32>) {
    %c0 = arith.constant 0 : i64
    // expected-note @+1 {{so ranks run this 'for' a different number of times}}
    md.for %i = %c0 to %n {
      // expected-error @+2 {{'all_reduce sum' over group world is in a loop whose trip count differs between ranks}}
      // expected-note @+1 {{fix: take the bounds of 'for'}}
      %s = md.all_reduce %t sum group world : tensor<f32>
    }
    md.return
  }
  md.func @outer(%n: i64, %t: tensor<f32>) {
    // expected-note @+1 {{and is passed to '@inner' as argument #0 here}}
    md.call @inner(%n, %t) : (i64, tensor<f32>) -> ()
    md.return
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'rank' differs between ranks}}
    %r = md.rank : i64
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    // expected-note @+1 {{and is passed to '@outer' as argument #0 here}}
    md.call @outer(%r, %m) : (i64, tensor<f32>) -> ()
  }
}

// -----

// Shape 4, two calls deep: the branch on the local loss is in the first
// callee, the barrier in the second.
md.model @branch_two_calls_deep {
  md.func @inner() {
    // expected-note @+1 {{'@inner' runs 'barrier' over group world here}}
    md.barrier group world
    md.return
  }
  md.func @outer(%high: i1) {
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    md.if %high {
      // expected-error @+2 {{the call to '@inner' is under a condition that differs between ranks: the ranks that skip it leave the others waiting in 'barrier' over group world inside it}}
      // expected-note @+1 {{fix: branch on 'mean(loss)' instead of 'loss'}}
      md.call @inner() : () -> ()
    }
    md.return
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-note @+1 {{'loss' is this rank's own loss, before any reduction}}
    %l = md.loss : tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %high = arith.cmpf ogt, %v, %c3 : f32
    // expected-note @+1 {{and is passed to '@outer' as argument #0 here}}
    md.call @outer(%high) : (i1) -> ()
  }
}

// -----

// Shape 7, one call deep: a block receives a parameter on some ranks only.
md.model @parameter_passed_to_block_under_data_branch {
  md.param @w : tensor<4xf32> init <ones> unit 0
  md.func @Scale(%x: tensor<2x4xf32>, %w: tensor<4xf32>) -> tensor<2x4xf32> {
    %y = md.mul %x, %w : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
    md.return %y : tensor<2x4xf32>
  }
  // expected-note @+1 {{argument #0 of the forward is this rank's own micro-batch}}
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4xf32>
    // expected-note @+1 {{so does this 'md.mean'}}
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    // expected-note @+1 {{so does this 'tensor.extract'}}
    %v = tensor.extract %l[] : tensor<f32>
    %c0 = arith.constant 0.0 : f32
    // expected-note @+1 {{so does this comparison}}
    %pos = arith.cmpf ogt, %v, %c0 : f32
    // expected-note @+1 {{so ranks disagree about this 'if'}}
    %r = md.if %pos -> (tensor<2x4xf32>) {
      // expected-error @+2 {{parameter '@w' is used on some ranks only}}
      // expected-note @+1 {{fix: use every parameter on every rank}}
      %y = md.call @Scale(%x, %w) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
      md.yield %y : tensor<2x4xf32>
    } else {
      md.yield %x : tensor<2x4xf32>
    }
    %m = md.mean %r dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %m : tensor<f32>
  }
}

// -----

// A rank0_only body that communicates is rejected when the IR is verified,
// with the collective it reaches through a call and the fix.
md.model @rank0_only_every_calls_a_collective {
  md.func @sync(%t: tensor<f32>) -> tensor<f32> {
    // expected-note @+1 {{'md.all_reduce' communicates here}}
    %s = md.all_reduce %t sum group world : tensor<f32>
    md.return %s : tensor<f32>
  }
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    // expected-error @+2 {{'md.every' op is rank0_only but communicates}}
    // expected-note @+1 {{fix: run the collective on every rank, outside the rank0_only body, and keep only pure side effects (log, print) in it}}
    md.every 10 minutes rank0_only {
      %l = md.loss : tensor<f32>
      %s = md.call @sync(%l) : (tensor<f32>) -> tensor<f32>
    }
  }
}
