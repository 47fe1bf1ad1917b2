// RUN: md-opt %s --md-plan-memory | FileCheck %s
// RUN: md-opt %s --md-explain="world-size=2 list-buffers" -o /dev/null | FileCheck %s --check-prefix=BUFFERS

// The hooks' md.evaluate runs the forward in a block of its own (the plan
// emitter's), after the step: its buffers count too, and here its peak is
// the larger one. At W = 2 the master shard holds 18 elements (72 bytes).
// The hooks follow the step's positions 0-2: md.every at 3, md.evaluate at
// 4, its forward at 5-12 (batch, shard load, gather, two views, matmul,
// sum, yield). There the batch [16, 8] f32 (512 bytes), the unit's master
// gathered at its first md.param_ref (36 f32, 144 bytes; the views alias
// it), the product [16, 4] f32 (256) and the loss (4) live from their
// instruction to their last use. The peak is at the matmul (10): batch,
// gathered unit and product, with the md.evaluate's own result (4).
// CHECK-LABEL: md.model @evaluated
// CHECK-SAME: md.memory = {activations = 772 : i64, comm_buffers = 0 : i64, grad_acc = 0 : i64, grads = 0 : i64, optimizer = 0 : i64, params = 216 : i64, peak = 988 : i64, world_size = 2 : i64}

// BUFFERS:      buffers (positions of 16, peak at 10):
// BUFFERS-NEXT:   * persistent          72  params       md.state @u0.master
// BUFFERS-NEXT:     0-1                512  activations  md.batch
// BUFFERS-NEXT:     1-2                  4  activations  md.sum
// BUFFERS-NEXT:   * 4-13                 4  activations  md.evaluate
// BUFFERS-NEXT:   * 5-10               512  activations  md.evaluate
// BUFFERS-NEXT:   * 7-10               144  params       md.param_ref
// BUFFERS-NEXT:   * 10-11              256  activations  md.matmul
// BUFFERS-NEXT:     11-12                4  activations  md.sum
md.model @evaluated attributes {world_size = 2 : i64} {
  md.param @w : tensor<4x8xf32> init #md.init<normal(0.0, 0.02)> unit 0 offset 0
  md.param @b : tensor<4xf32> init #md.init<zeros> unit 0 offset 32
  md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
  md.forward @forward(%x: tensor<16x8xf32>) -> tensor<f32> {
    %w = md.param_ref @w : tensor<4x8xf32>
    %b = md.param_ref @b : tensor<4xf32>
    %h = md.matmul %x, %w bias %b transpose_b : tensor<16x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<16x4xf32>
    %l = md.sum %h dims [0, 1] : tensor<16x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 32 micro_batch 16
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<16x8xf32>
    %l = md.sum %x dims [0, 1] : tensor<16x8xf32> to tensor<f32>
    md.record_loss %l : tensor<f32>
  } hooks {
    md.every 10 steps {
      %v = md.evaluate @forward(#md.data<synthetic, "">) : tensor<f32>
      md.log "val"(%v : tensor<f32>)
    }
  }
}
