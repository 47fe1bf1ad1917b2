// RUN: md-opt %s -split-input-file -verify-diagnostics
//
// One case per function @<op>_<what_is_wrong>, on a 1-D mesh of 4 ranks unless
// it says otherwise (hybrid: world 8 with shard groups of 2; symbolic: no W).

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_element_type_mismatch(%x: tensor<128xbf16>) -> tensor<512xf32> {
    // expected-error @+1 {{result element type 'f32' differs from input element type 'bf16'}}
    %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<512xf32>
    md.return %0 : tensor<512xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_rank_mismatch(%x: tensor<128xf32>) -> tensor<4x128xf32> {
    // expected-error @+1 {{result rank 2 differs from input rank 1}}
    %0 = md.all_gather %x group world : tensor<128xf32> -> tensor<4x128xf32>
    md.return %0 : tensor<4x128xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_axis_out_of_range(%x: tensor<128xf32>) -> tensor<512xf32> {
    // expected-error @+1 {{axis 1 is out of range for a rank-1 tensor}}
    %0 = md.all_gather %x axis 1 group world : tensor<128xf32> -> tensor<512xf32>
    md.return %0 : tensor<512xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_negative_axis(%x: tensor<128xf32>) -> tensor<512xf32> {
    // expected-error @+1 {{attribute 'axis' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
    %0 = md.all_gather %x axis -1 group world : tensor<128xf32> -> tensor<512xf32>
    md.return %0 : tensor<512xf32>
  }
}

// -----

// The shard is what this rank holds: its shape is never symbolic.
md.model @m {
  md.func @all_gather_dynamic_shard(%x: tensor<?xf32>) -> tensor<?xf32> {
    // expected-error @+1 {{input shape ? must be static: it is this rank's shard}}
    %0 = md.all_gather %x group world : tensor<?xf32> -> tensor<?xf32>
    md.return %0 : tensor<?xf32>
  }
}

// -----

// A dynamic shard is the 1-D shard of a flat buffer, never of a 2-D tensor.
md.model @m {
  md.func @all_gather_dynamic_shard_of_2d(%x: tensor<?xf32>) -> tensor<4x8xf32> {
    // expected-error @+1 {{result rank 2 differs from input rank 1}}
    %0 = md.all_gather %x group world : tensor<?xf32> -> tensor<4x8xf32>
    md.return %0 : tensor<4x8xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_other_dim_differs(%x: tensor<4x8xf32>) -> tensor<16x4xf32> {
    // expected-error @+1 {{dim 1 differs between input (8) and result (4): only axis 0 is gathered}}
    %0 = md.all_gather %x group world : tensor<4x8xf32> -> tensor<16x4xf32>
    md.return %0 : tensor<16x4xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_wrong_gathered_dim(%x: tensor<128xbf16>) -> tensor<384xbf16> {
    // expected-error @+1 {{result dim 0 must be group size 4 x input dim 128 = 512, got 384}}
    %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<384xbf16>
    md.return %0 : tensor<384xbf16>
  }
}

// -----

// Once W is pinned the gathered dim must be static.
md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_dynamic_with_static_group(%x: tensor<128xf32>) -> tensor<?xf32> {
    // expected-error @+1 {{result dim 0 must be group size 4 x input dim 128 = 512, got ?}}
    %0 = md.all_gather %x group world : tensor<128xf32> -> tensor<?xf32>
    md.return %0 : tensor<?xf32>
  }
}

// -----

// Hybrid mesh: the shard group has 2 ranks, not 8.
md.model @m attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  md.func @all_gather_hybrid_wrong_group(%x: tensor<128xbf16>) -> tensor<1024xbf16> {
    // expected-error @+1 {{result dim 0 must be group size 2 x input dim 128 = 256, got 1024}}
    %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<1024xbf16>
    md.return %0 : tensor<1024xbf16>
  }
}

// -----

// W is symbolic, but 40 is no multiple of 16.
md.model @m {
  md.func @all_gather_symbolic_not_multiple(%x: tensor<16xf32>) -> tensor<40xf32> {
    // expected-error @+1 {{result dim 0 must be a multiple of input dim 16 (the group size times it), got 40}}
    %0 = md.all_gather %x group world : tensor<16xf32> -> tensor<40xf32>
    md.return %0 : tensor<40xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_gather_rank0_only(%x: tensor<128xf32>) -> tensor<512xf32> {
    // expected-error @+1 {{a collective cannot be rank0_only: the other ranks would never join it}}
    %0 = md.all_gather %x group world {rank0_only} : tensor<128xf32> -> tensor<512xf32>
    md.return %0 : tensor<512xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_element_type_mismatch(%g: tensor<512xf32>) -> tensor<128xbf16> {
    // expected-error @+1 {{result element type 'bf16' differs from input element type 'f32'}}
    %0 = md.reduce_scatter %g sum group shard : tensor<512xf32> -> tensor<128xbf16>
    md.return %0 : tensor<128xbf16>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_not_divisible(%g: tensor<1001xf32>) -> tensor<250xf32> {
    // expected-error @+1 {{reduce_scatter of 1001 elements along axis 0 is not divisible by group size 4}}
    %0 = md.reduce_scatter %g sum group world : tensor<1001xf32> -> tensor<250xf32>
    md.return %0 : tensor<250xf32>
  }
}

// -----

// Hybrid mesh: along axis 1 over the shard group of 2 ranks.
md.model @m attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  md.func @reduce_scatter_hybrid_not_divisible(%g: tensor<4x7xf32>) -> tensor<4x3xf32> {
    // expected-error @+1 {{reduce_scatter of 7 elements along axis 1 is not divisible by group size 2}}
    %0 = md.reduce_scatter %g avg axis 1 group shard : tensor<4x7xf32> -> tensor<4x3xf32>
    md.return %0 : tensor<4x3xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_wrong_result_dim(%g: tensor<1024xf32>) -> tensor<128xf32> {
    // expected-error @+1 {{result dim 0 must be input dim 1024 / group size 4 = 256, got 128}}
    %0 = md.reduce_scatter %g sum group world : tensor<1024xf32> -> tensor<128xf32>
    md.return %0 : tensor<128xf32>
  }
}

// -----

// Hybrid mesh: the replicate group has 4 ranks.
md.model @m attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  md.func @reduce_scatter_hybrid_wrong_result_dim(%g: tensor<64xf32>) -> tensor<32xf32> {
    // expected-error @+1 {{result dim 0 must be input dim 64 / group size 4 = 16, got 32}}
    %0 = md.reduce_scatter %g sum group replicate : tensor<64xf32> -> tensor<32xf32>
    md.return %0 : tensor<32xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_dynamic_with_static_group(%g: tensor<?xf32>) -> tensor<256xf32> {
    // expected-error @+1 {{input dim 0 must be group size 4 x result dim 256 = 1024, got ?}}
    %0 = md.reduce_scatter %g sum group world : tensor<?xf32> -> tensor<256xf32>
    md.return %0 : tensor<256xf32>
  }
}

// -----

md.model @m {
  md.func @reduce_scatter_dynamic_shard(%g: tensor<?xf32>) -> tensor<?xf32> {
    // expected-error @+1 {{result shape ? must be static: it is this rank's shard}}
    %0 = md.reduce_scatter %g sum group world : tensor<?xf32> -> tensor<?xf32>
    md.return %0 : tensor<?xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_other_dim_differs(%g: tensor<8x4xf32>) -> tensor<2x8xf32> {
    // expected-error @+1 {{dim 1 differs between input (4) and result (8): only axis 0 is scattered}}
    %0 = md.reduce_scatter %g sum group world : tensor<8x4xf32> -> tensor<2x8xf32>
    md.return %0 : tensor<2x8xf32>
  }
}

// -----

md.model @m {
  md.func @reduce_scatter_symbolic_not_multiple(%g: tensor<100xf32>) -> tensor<16xf32> {
    // expected-error @+1 {{input dim 0 must be a multiple of result dim 16 (the group size times it), got 100}}
    %0 = md.reduce_scatter %g sum group world : tensor<100xf32> -> tensor<16xf32>
    md.return %0 : tensor<16xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @reduce_scatter_rank0_only(%g: tensor<512xf32>) -> tensor<128xf32> {
    // expected-error @+1 {{a collective cannot be rank0_only: the other ranks would never join it}}
    %0 = md.reduce_scatter %g sum group world {rank0_only} : tensor<512xf32> -> tensor<128xf32>
    md.return %0 : tensor<128xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_reduce_type_mismatch(%x: tensor<4xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{failed to verify that all of {input, result} have same type}}
    %0 = "md.all_reduce"(%x) <{group = #md.group<world>, reduction_kind = #md.reduction<sum>}> : (tensor<4xf32>) -> tensor<8xf32>
    md.return %0 : tensor<8xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_reduce_unknown_reduction(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{unknown keyword 'mean'; expected one of: sum, avg, max, min, prod}}
    %0 = md.all_reduce %x mean group world : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_reduce_unsupported_element_type(%x: tensor<4xi8>) -> tensor<4xi8> {
    // expected-error @+1 {{operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float or 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4xi8>'}}
    %0 = md.all_reduce %x sum group world : tensor<4xi8>
    md.return %0 : tensor<4xi8>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @all_reduce_rank0_only(%x: tensor<f32>) -> tensor<f32> {
    // expected-error @+1 {{a collective cannot be rank0_only: the other ranks would never join it}}
    %0 = md.all_reduce %x sum group world {rank0_only} : tensor<f32>
    md.return %0 : tensor<f32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @broadcast_type_mismatch(%x: tensor<4xf32>) -> tensor<4xbf16> {
    // expected-error @+1 {{failed to verify that all of {input, result} have same type}}
    %0 = "md.broadcast"(%x) <{group = #md.group<world>, root = 0 : i64}> : (tensor<4xf32>) -> tensor<4xbf16>
    md.return %0 : tensor<4xbf16>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @broadcast_root_out_of_range(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{root 4 is out of range for group world of size 4}}
    %0 = md.broadcast %x root 4 group world : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }
}

// -----

// Hybrid mesh: root 2 is within the world but not within a shard group of 2.
md.model @m attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  md.func @broadcast_hybrid_root_out_of_range(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{root 2 is out of range for group shard of size 2}}
    %0 = md.broadcast %x root 2 group shard : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @broadcast_unknown_group(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{unknown keyword 'everyone'; expected one of: world, shard, replicate}}
    %0 = md.broadcast %x root 0 group everyone : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @broadcast_rank0_only(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{a collective cannot be rank0_only: the other ranks would never join it}}
    %0 = md.broadcast %x root 0 group world {rank0_only} : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @barrier_negative_bucket() {
    // expected-error @+1 {{attribute 'bucket' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
    md.barrier group world bucket -1
    md.return
  }
}

// -----

md.model @m attributes {world_size = 4 : i64} {
  md.func @barrier_rank0_only() {
    // expected-error @+1 {{a collective cannot be rank0_only: the other ranks would never join it}}
    md.barrier group world {rank0_only}
    md.return
  }
}
