// RUN: md-opt %s -split-input-file -verify-diagnostics

md.model @plan_empty_name attributes {plan = #md.plan<name = "", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{plan name is empty}}
}

// -----

md.model @plan_unknown_preset attributes {plan = #md.plan<name = "p", preset = "fsdp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{unknown preset 'fsdp'; expected one of: single, ddp, zero1, fsdp-grad-op, fsdp-full, fsdp-hybrid}}
}

// -----

md.model @plan_hybrid_group_one attributes {plan = #md.plan<name = "p", preset = "ddp", shard = hybrid(shard_group = 1), wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{hybrid shard group size must be > 1, got 1}}
}

// -----

md.model @plan_hybrid_no_group attributes {plan = #md.plan<name = "p", preset = "ddp", shard = hybrid, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{expected '('}}
}

// -----

md.model @plan_unknown_shard attributes {plan = #md.plan<name = "p", preset = "ddp", shard = zero3, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{unknown keyword 'zero3'; expected one of: none, optimizer, grad_op, full, hybrid}}
}

// -----

md.model @plan_wrap_no_blocks attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = blocks(), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{wrap blocks(...) names no repeated parameter}}
}

// -----

md.model @plan_wrap_block_twice attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = blocks(h, h), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{wrap names 'h' twice}}
}

// -----

md.model @plan_wrap_min_params_zero attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = size(min_params = 0), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{wrap size(min_params = N) needs N > 0, got 0}}
}

// -----

md.model @plan_unknown_wrap attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = layers, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{unknown keyword 'layers'; expected one of: none, blocks, size}}
}

// -----

md.model @plan_precision_i32 attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = i32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{precision param must be bf16, f16 or f32, got 'i32'}}
}

// -----

md.model @plan_precision_master_bf16 attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = bf16}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{precision master must be f32: md's optimizer updates keep master weights and optimizer state in f32, got 'bf16'}}
}

// -----

md.model @plan_precision_missing_field attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{missing 'buffer'}}
}

// -----

md.model @plan_precision_unknown_field attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, grad = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{unknown field 'grad'; expected one of: param, reduce, buffer, master}}
}

// -----

md.model @plan_bucket_cap_zero attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 0, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{bucket_cap must be > 0 bytes, got 0}}
}

// -----

md.model @plan_prefetch_backward_unknown attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = early}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{unknown keyword 'early'; expected one of: pre, post, none}}
}

// -----

md.model @plan_prefetch_forward_not_bool attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = yes, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{expected true or false, got 'yes'}}
}

// -----

md.model @plan_checkpoint_block_twice attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = blocks(h, h)>} {
// expected-error @-1 {{checkpoint_activations names 'h' twice}}
}

// -----

md.model @plan_checkpoint_bad_keyword attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = all>} {
// expected-error @-1 {{expected blocks(...) or none, got 'all'}}
}

// -----

md.model @plan_missing_field attributes {plan = #md.plan<name = "p", preset = "ddp", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{missing 'bucket_cap'}}
}

// -----

md.model @plan_unknown_field attributes {plan = #md.plan<shrad = none>} {
// expected-error @-1 {{unknown field 'shrad'; expected one of: name, preset, shard, wrap, precision, bucket_cap, prefetch, reshard_after_forward, checkpoint_activations}}
}

// -----

md.model @plan_field_twice attributes {plan = #md.plan<name = "p", shard = none, shard = full>} {
// expected-error @-1 {{'shard' is given twice}}
}

// -----

md.model @plan_single_on_four_ranks attributes {world_size = 4 : i64, plan = #md.plan<name = "single", preset = "single", shard = none, wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{'md.model' op plan 'single' runs on one rank, but world_size is 4}}
}

// -----

md.model @plan_hybrid_group_mismatch attributes {shard_group_size = 4 : i64, plan = #md.plan<name = "p", preset = "fsdp-hybrid", shard = hybrid(shard_group = 8), wrap = none, precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
// expected-error @-1 {{'md.model' op shard_group_size 4 differs from the shard group 8 of plan 'p'}}
}
