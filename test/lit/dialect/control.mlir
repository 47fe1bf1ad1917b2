// RUN: md-opt %s | md-opt | FileCheck %s
// RUN: md-opt %s --mlir-print-op-generic | md-opt | FileCheck %s

md.model @m {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // CHECK-LABEL: md.train @forward
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
    // CHECK: %[[S:.*]] = md.step : i64
    %s = md.step : i64
    // CHECK-NEXT: md.lr %[[S]] : f32
    %lr = md.lr %s : f32
  } hooks {
    // CHECK: %[[R:.*]] = md.rank : i64
    %r = md.rank : i64
    // CHECK-NEXT: md.local_rank : i64
    %lr = md.local_rank : i64
    // CHECK-NEXT: md.world_size : i64
    %w = md.world_size : i64
    // CHECK-NEXT: md.epoch : i64
    %e = md.epoch : i64
    // CHECK-NEXT: md.loss : tensor<f32>
    %loss = md.loss : tensor<f32>
    // CHECK-NEXT: md.wall_time : f64
    %t = md.wall_time : f64
    // CHECK-NEXT: %[[E:.*]] = md.file_exists "STOP" : i1
    %stop = md.file_exists "STOP" : i1
    %c0 = arith.constant 0 : i64
    %is0 = arith.cmpi eq, %r, %c0 : i64
    // CHECK: md.if %{{.*}} {
    // CHECK-NEXT: md.log "rank"(%[[R]] : i64) rank0_only
    // CHECK-NEXT: }
    md.if %is0 {
      md.log "rank"(%r : i64) rank0_only
    }
    // CHECK: md.if %[[E]] {
    // CHECK-NEXT: md.print "stopping"
    // CHECK-NEXT: md.exit "STOP file found"
    // CHECK-NEXT: } else {
    // CHECK-NEXT: md.print "going on" rank0_only
    // CHECK-NEXT: }
    md.if %stop {
      md.print "stopping"
      md.exit "STOP file found"
    } else {
      md.print "going on" rank0_only
    }
    // CHECK: %[[V:.*]] = md.evaluate @forward(<tokens, "val.bin">) batches 4 : tensor<f32>
    %v = md.evaluate @forward(#md.data<tokens, "val.bin">) batches 4 : tensor<f32>
    // CHECK: md.evaluate @forward(<npy, "val.npy">) : tensor<f32>
    %v2 = md.evaluate @forward(#md.data<npy, "val.npy">) : tensor<f32>
    // CHECK: md.if %[[E]] -> (tensor<f32>) {
    // CHECK-NEXT: md.yield %[[V]] : tensor<f32>
    // CHECK-NEXT: } else {
    // CHECK-NEXT: md.yield %{{.*}} : tensor<f32>
    // CHECK-NEXT: }
    %best = md.if %stop -> (tensor<f32>) {
      md.yield %v : tensor<f32>
    } else {
      md.yield %v2 : tensor<f32>
    }
    // CHECK: md.log "val"(%{{.*}}, %{{.*}} : tensor<f32>, f64)
    md.log "val"(%best, %t : tensor<f32>, f64)
    // CHECK: md.every 250 steps {
    // CHECK-NEXT: md.save sharded
    // CHECK-NEXT: }
    md.every 250 steps {
      md.save sharded
    }
    // CHECK: md.every 10 seconds {
    // CHECK-NEXT: md.save full "ckpt/latest"
    md.every 10 seconds {
      md.save full "ckpt/latest"
    }
    // CHECK: md.save sharded "ckpt" keep 3{{$}}
    // CHECK-NEXT: md.save full keep 1{{$}}
    md.save sharded "ckpt" keep 3
    md.save full keep 1
    // CHECK: md.every 30 minutes rank0_only {
    // CHECK-NEXT: md.print "still training"(%{{.*}} : i64)
    md.every 30 minutes rank0_only {
      md.print "still training"(%e : i64)
    }
    // CHECK: md.for %[[I:.*]] = %{{.*}} to %{{.*}} {
    // CHECK-NEXT: md.print "i"(%[[I]] : i64)
    // CHECK-NEXT: }
    md.for %i = %c0 to %w {
      md.print "i"(%i : i64)
    }
    // A print without values followed by a value is not read as printing it.
    // CHECK: md.print "no values"{{$}}
    // CHECK-NEXT: %[[S2:.*]] = md.step : i64
    // CHECK-NEXT: md.log "no values"{{$}}
    // CHECK-NEXT: md.print "step"(%[[S2]] : i64)
    md.print "no values"
    %s2 = md.step : i64
    md.log "no values"
    md.print "step"(%s2 : i64)
    // CHECK: md.exit "diverged" failure{{$}}
    md.exit "diverged" failure
    // CHECK: md.exit{{$}}
    md.exit
  }
}
