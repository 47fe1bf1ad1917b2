// RUN: md-opt %s | md-opt | FileCheck %s
// RUN: md-opt %s --mlir-print-op-generic | md-opt | FileCheck %s

// Every shard kind, wrap policy and prefetch mode of #md.plan, as the
// `plan` attribute of md.model, round-trips.

// CHECK-LABEL: md.model @plan_single
// CHECK-SAME: plan = #md.plan<name = "single", preset = "single", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>
// CHECK-SAME: world_size = 1 : i64
md.model @plan_single attributes {world_size = 1 : i64, plan = #md.plan<name = "single", preset = "single", shard = none, wrap = none, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
}

// CHECK-LABEL: md.model @plan_zero1
// CHECK-SAME: #md.plan<name = "my-zero", preset = "zero1", shard = optimizer, wrap = size(min_params = 100000), precision = {param = bf16, reduce = bf16, buffer = f16, master = f32}, bucket_cap = 1048576, prefetch = {forward = false, backward = none}, reshard_after_forward = false, checkpoint_activations = none>
md.model @plan_zero1 attributes {plan = #md.plan<name = "my-zero", preset = "zero1", shard = optimizer, wrap = size(min_params = 100000), precision = {param = bf16, reduce = bf16, buffer = f16, master = f32}, bucket_cap = 1048576, prefetch = {forward = false, backward = none}, reshard_after_forward = false, checkpoint_activations = none>} {
}

// CHECK-LABEL: md.model @plan_grad_op
// CHECK-SAME: shard = grad_op, wrap = blocks(h, "0h"), {{.*}} prefetch = {forward = true, backward = post}, {{.*}} checkpoint_activations = blocks(h)>
md.model @plan_grad_op attributes {plan = #md.plan<name = "fsdp-grad-op", preset = "fsdp-grad-op", shard = grad_op, wrap = blocks(h, "0h"), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = post}, reshard_after_forward = false, checkpoint_activations = blocks(h)>} {
}

// Fields in another order are accepted and printed in the canonical one.
// CHECK-LABEL: md.model @plan_full
// CHECK-SAME: #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = full, wrap = blocks(h), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>
md.model @plan_full attributes {plan = #md.plan<preset = "fsdp-full", name = "fsdp-full", wrap = blocks(h), shard = full, prefetch = {backward = pre, forward = true}, precision = {master = f32, param = bf16, reduce = f32, buffer = f32}, bucket_cap = 26214400, checkpoint_activations = none, reshard_after_forward = true>} {
}

// CHECK-LABEL: md.model @plan_hybrid
// CHECK-SAME: shard = hybrid(shard_group = 8)
// CHECK-SAME: shard_group_size = 8 : i64
// CHECK-SAME: world_size = 16 : i64
md.model @plan_hybrid attributes {world_size = 16 : i64, shard_group_size = 8 : i64, plan = #md.plan<name = "fsdp-hybrid", preset = "fsdp-hybrid", shard = hybrid(shard_group = 8), wrap = blocks(h), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
}
