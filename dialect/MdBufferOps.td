//===- MdBufferOps.td - md buffer ops ---------------------------*- tablegen -*-===//
//
// Precision changes (`md.cast`) and flat buffers: `md.flatten` packs tensors
// into one 1-D buffer (a wrap unit's flat parameter, a gradient bucket) and
// `md.view` reads a tensor back out of one.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDBUFFEROPS_TD
#define MD_DIALECT_MDBUFFEROPS_TD

include "dialect/MdBase.td"
include "dialect/MdAttrs.td"
include "dialect/MdInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def MD_CastOp : MD_Op<"cast", [Pure]> {
  let summary = "converts a tensor between bf16, f16 and f32, or ints to floats";
  let description = [{
    Converts every element to the result's element type with IEEE
    round-to-nearest-even (PyTorch's `Tensor.to(dtype)`); widening to f32 is
    exact. The shape is unchanged; both element types are bf16, f16 or f32,
    or the input is i32 or i64 and the result a float: the integer's nearest
    f32 (exact below 2^24), rounded once more to a narrower result (positions
    for a table of angles). No gradient flows into an integer.

    Folds away when the types are equal, and folds constants. A chain
    `cast(cast(x : A -> B) : B -> C)` becomes `cast(x : A -> C)`, or `x` when
    `C = A`, only when `A -> B` is exact (B holds every value of A: `A = B`,
    `bf16 -> f32`, `f16 -> f32`); `f32 -> bf16 -> f32` rounds and stays.

    ```mlir
    %h = md.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_FlattenOp : MD_Op<"flatten", [Pure]> {
  let summary = "packs tensors into one zero-padded 1-D buffer";
  let description = [{
    Concatenates the row-major flattening of each operand, in order, into a
    1-D buffer of `N` elements and fills the rest with zeros: operand `i`
    occupies elements `[o_i, o_i + numel_i)` with `o_0 = 0` and
    `o_{i+1} = o_i + numel_i`. `N` is at least the total number of elements
    and is usually padded up to a multiple of the world size, so that the
    buffer shards evenly. All operands and the result have the same element
    type and static shapes. Used for the flat parameter of a wrap unit and for
    gradient buckets; `md.view` reads the operands back.

    ```mlir
    %flat = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<40xf32>
    ```
  }];
  let arguments = (ins Variadic<MD_AnyTensor>:$inputs);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MD_ViewOp : MD_Op<"view", [Pure]> {
  let summary = "a tensor read out of a 1-D flat buffer";
  let description = [{
    Reinterprets the elements `[offset, offset + numel)` of the 1-D buffer
    `source` as a tensor of the result's (static) shape, row-major. The
    element types are equal, `offset >= 0` and `offset + numel <= N`.

    A view of an `md.flatten` at exactly the offset and type of one of its
    operands folds to that operand; a view of a whole buffer with its own type
    folds to the buffer.

    ```mlir
    %w = md.view %flat[0] : tensor<40xf32> to tensor<4x8xf32>
    %b = md.view %flat[32] : tensor<40xf32> to tensor<8xf32>
    ```
  }];
  let arguments = (ins MD_AnyTensor:$source, I64Attr:$offset);
  let results = (outs MD_AnyTensor:$result);
  let assemblyFormat = [{
    $source `[` $offset `]` attr-dict `:` type($source) `to` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

#endif // MD_DIALECT_MDBUFFEROPS_TD
