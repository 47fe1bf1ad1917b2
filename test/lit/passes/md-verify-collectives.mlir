// RUN: md-opt %s -split-input-file --pass-pipeline='builtin.module(md.model(md-verify-collectives))' | FileCheck %s

// The safe twins of md-verify-collectives-errors.mlir: programs that branch
// on the rank, loop, stop or size tensors, but in ways every rank agrees on.
// The pass accepts them and changes nothing.

// Rank-gated pure side effects: no rank waits for a print or a log.
// CHECK-LABEL: md.model @print_and_log_under_rank
// CHECK: md.print "rank 0 here"
md.model @print_and_log_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    md.if %is0 {
      md.print "rank 0 here"
      md.log "train"(%l, %m : tensor<f32>, tensor<f32>)
    }
  }
}

// -----

// A branch on the all-reduced loss: every rank takes it together.
// CHECK-LABEL: md.model @save_on_mean_loss
// CHECK: md.save full "ckpt"
md.model @save_on_mean_loss {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    %high = arith.cmpf ogt, %v, %c3 : f32
    md.if %high {
      md.save full "ckpt"
      %e = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    }
  }
}

// -----

// Step counters and configuration are the same on every rank.
// CHECK-LABEL: md.model @branches_on_step_epoch_world_size_lr
md.model @branches_on_step_epoch_world_size_lr {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %s = md.step : i64
    %e = md.epoch : i64
    %w = md.world_size : i64
    %lr = md.lr %s : f32
    %c1 = arith.constant 1 : i64
    %c1000 = arith.constant 1000 : i64
    %late = arith.cmpi sgt, %s, %c1000 : i64
    %multi = arith.cmpi sgt, %w, %c1 : i64
    %both = arith.andi %late, %multi : i1
    md.if %both {
      %v = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    }
    %second = arith.cmpi sge, %e, %c1 : i64
    md.if %second {
      md.save sharded
    }
    %tiny = arith.constant 1.0e-5 : f32
    %low = arith.cmpf olt, %lr, %tiny : f32
    md.if %low {
      md.exit "schedule ended"
    }
  }
}

// -----

// evaluate's loss is all-reduced: a branch on it is uniform.
// CHECK-LABEL: md.model @save_on_evaluated_loss
md.model @save_on_evaluated_loss {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %e = md.evaluate @forward(<synthetic, "">) : tensor<f32>
    %v = tensor.extract %e[] : tensor<f32>
    %c2 = arith.constant 2.0 : f32
    %good = arith.cmpf olt, %v, %c2 : f32
    md.if %good {
      md.save sharded "best"
    }
  }
}

// -----

// Shape 8's safe twin: rank 0's decision is broadcast before anyone acts.
// CHECK-LABEL: md.model @stop_decision_broadcast_from_rank0
md.model @stop_decision_broadcast_from_rank0 {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %t = md.wall_time : f64
    %t32 = arith.truncf %t : f64 to f32
    %tt = tensor.from_elements %t32 : tensor<f32>
    %b = md.broadcast %tt root 0 group world : tensor<f32>
    %v = tensor.extract %b[] : tensor<f32>
    %hour = arith.constant 3600.0 : f32
    %late = arith.cmpf ogt, %v, %hour : f32
    md.if %late {
      md.save sharded "final"
      md.exit "time is up"
    }
    md.save sharded
  }
}

// -----

// A function without collectives may run on some ranks only.
// CHECK-LABEL: md.model @compute_only_call_under_rank
md.model @compute_only_call_under_rank {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.func @report(%t: tensor<f32>) {
    %d = md.scale %t by 2.0 : tensor<f32>
    md.print "doubled loss"(%d : tensor<f32>)
    md.return
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %l = md.loss : tensor<f32>
    md.if %is0 {
      md.call @report(%l) : (tensor<f32>) -> ()
    }
  }
}

// -----

// Loops: collectives in a loop every rank runs as often; a rank-long loop
// that only prints.
// CHECK-LABEL: md.model @uniform_loop_and_rank_loop_of_prints
md.model @uniform_loop_and_rank_loop_of_prints {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %c0 = arith.constant 0 : i64
    %w = md.world_size : i64
    %r = md.rank : i64
    %l = md.loss : tensor<f32>
    md.for %i = %c0 to %w {
      %m = md.all_reduce %l sum group world : tensor<f32>
      %c = arith.cmpi eq, %i, %r : i64
      md.if %c {
        md.print "my turn"(%m : tensor<f32>)
      }
    }
    md.for %j = %c0 to %r {
      md.print "counting to my rank"(%j : i64)
    }
  }
}

// -----

// A wall-clock `every` is decided by rank 0 and broadcast; a rank0_only one
// communicates nothing.
// CHECK-LABEL: md.model @timed_every_with_rank_inside
md.model @timed_every_with_rank_inside {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    md.every 30 minutes {
      md.save sharded
      %r = md.rank : i64
      %c0 = arith.constant 0 : i64
      %is0 = arith.cmpi eq, %r, %c0 : i64
      md.if %is0 {
        md.print "checkpoint written"
      }
    }
    md.every 5 minutes rank0_only {
      md.print "still alive"
    }
  }
}

// -----

// Shards differ between ranks in value, not in size: ceil(N / W) on every
// rank.
// CHECK-LABEL: md.model @flat_shards_have_uniform_sizes
md.model @flat_shards_have_uniform_sizes {
  md.state @u0.master : tensor<?xf32> shard(12) group world role master unit 0
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
    %s = md.state_load @u0.master : tensor<?xf32>
    %f = md.all_gather %s group world : tensor<?xf32> -> tensor<12xf32>
    %sl = md.shard_slice %f group world : tensor<12xf32> -> tensor<?xf32>
    %g = md.all_gather %sl group world : tensor<?xf32> -> tensor<12xf32>
    %r = md.reduce_scatter %g avg group world : tensor<12xf32> -> tensor<?xf32>
    %sq = md.global_norm %r squared : tensor<?xf32> -> tensor<f32>
    %n = md.all_reduce %sq sum group world : tensor<f32>
  } hooks {
  }
}

// -----

// A tensor sized by the world size has the same size on every rank.
// CHECK-LABEL: md.model @world_sized_tensor
md.model @world_sized_tensor {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %w = md.world_size : i64
    %n = arith.index_cast %w : i64 to index
    %t = tensor.empty(%n) : tensor<?xf32>
    %s = md.all_reduce %t sum group world : tensor<?xf32>
  }
}

// -----

// One rank cannot disagree with itself.
// CHECK-LABEL: md.model @one_rank_cannot_desync
md.model @one_rank_cannot_desync attributes {world_size = 1 : i64} {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    md.if %is0 {
      md.save full "ckpt"
    }
  }
}

// -----

// SyncBatchNorm's all-reduces in the forward run on every rank; a branch on
// configuration may choose a parameter.
// CHECK-LABEL: md.model @forward_collectives_and_uniform_parameter_branch
md.model @forward_collectives_and_uniform_parameter_branch {
  md.param @w : tensor<4xf32> init <ones> unit 0
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %m0 = md.mean %x dims [0] : tensor<2x4xf32> to tensor<4xf32>
    %m = md.all_reduce %m0 avg group world {md.sync_batch_norm} : tensor<4xf32>
    %w = md.world_size : i64
    %c1 = arith.constant 1 : i64
    %multi = arith.cmpi sgt, %w, %c1 : i64
    %y = md.if %multi -> (tensor<4xf32>) {
      %p = md.param_ref @w : tensor<4xf32>
      %s = md.mul %m, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
      md.yield %s : tensor<4xf32>
    } else {
      md.yield %m : tensor<4xf32>
    }
    %l = md.mean %y dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %e = md.evaluate @forward(<synthetic, "">) : tensor<f32>
  }
}

// -----

// On a 1-D mesh the shard group is the world: its reduction is uniform.
// CHECK-LABEL: md.model @shard_group_is_the_world
md.model @shard_group_is_the_world {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group shard : tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %c3 = arith.constant 3.0 : f32
    %high = arith.cmpf ogt, %v, %c3 : f32
    md.if %high {
      md.save full
    }
  }
}

// -----

// Shape 5's safe twin: every rank stops together, so the save after it runs
// everywhere.
// CHECK-LABEL: md.model @stop_on_mean_loss_then_save
md.model @stop_on_mean_loss_then_save {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    %v = tensor.extract %m[] : tensor<f32>
    %nan = arith.cmpf une, %v, %v : f32
    md.if %nan {
      md.exit "loss is NaN on some rank"
    }
    md.save sharded
  }
}

// -----

// A rank-varying branch may choose a value that is only logged.
// CHECK-LABEL: md.model @rank_branch_choosing_a_logged_value
md.model @rank_branch_choosing_a_logged_value {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.mean %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
    %r = md.rank : i64
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    %l = md.loss : tensor<f32>
    %m = md.all_reduce %l avg group world : tensor<f32>
    %shown = md.if %is0 -> (tensor<f32>) {
      md.yield %m : tensor<f32>
    } else {
      md.yield %l : tensor<f32>
    }
    md.log "shown"(%shown : tensor<f32>)
  }
}
