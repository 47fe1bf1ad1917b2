//===- MdAttrs.td - md attributes: init, optimizer, schedule, data -*- tablegen -*-===//
//
// The recipe-level attributes of a training program. Floating-point
// parameters print in their shortest round-tripping form.
//
//===----------------------------------------------------------------------===//

#ifndef MD_DIALECT_MDATTRS_TD
#define MD_DIALECT_MDATTRS_TD

include "dialect/MdBase.td"

class MD_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Md_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def MD_InitAttr : MD_Attr<"Init", "init"> {
  let summary = "how a parameter is initialised";
  let description = [{
    `#md.init<zeros>`, `#md.init<ones>`, `#md.init<constant(0.5)>`,
    `#md.init<normal(0.0, 0.02)>` (mean, standard deviation) and
    `#md.init<uniform(-0.1, 0.1)>` (low, high). Every rank draws the same
    values from the recipe's seed and the parameter's name, so initialisation
    never differs between ranks.
  }];
  let parameters = (ins "::md::InitKind":$kind,
                        ArrayRefParameter<"::llvm::APFloat", "arguments">:$args);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def MD_AdamWAttr : MD_Attr<"AdamW", "adamw"> {
  let summary = "AdamW hyper-parameters (decoupled weight decay)";
  let description = [{
    `#md.adamw<lr = 6.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.1>`.
    The update is PyTorch's `torch.optim.AdamW` with `amsgrad=False`.
  }];
  let parameters = (ins APFloatParameter<"">:$lr, APFloatParameter<"">:$beta1, APFloatParameter<"">:$beta2,
                        APFloatParameter<"">:$eps, APFloatParameter<"">:$weight_decay);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MD_SGDAttr : MD_Attr<"SGD", "sgd"> {
  let summary = "SGD hyper-parameters (momentum, dampening, Nesterov)";
  let description = [{
    `#md.sgd<lr = 0.1, momentum = 0.9, dampening = 0.0, weight_decay = 0.0, nesterov = false>`.
    The update is PyTorch's `torch.optim.SGD`.
  }];
  let parameters = (ins APFloatParameter<"">:$lr, APFloatParameter<"">:$momentum, APFloatParameter<"">:$dampening,
                        APFloatParameter<"">:$weight_decay, "bool":$nesterov);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MD_ScheduleAttr : MD_Attr<"Schedule", "schedule"> {
  let summary = "learning-rate schedule";
  let description = [{
    `#md.schedule<cosine, warmup = 100, steps = 5000, min_lr = 0.0>`: linear
    warmup from 0 over `warmup` steps to the optimizer's lr, then constant,
    linear decay or cosine decay to `min_lr` at step `steps`.
  }];
  let parameters = (ins "::md::ScheduleKind":$kind, "int64_t":$warmup,
                        "int64_t":$steps, APFloatParameter<"">:$min_lr);
  let assemblyFormat = "`<` $kind `,` struct($warmup, $steps, $min_lr) `>`";
  let genVerifyDecl = 1;
}

def MD_DataAttr : MD_Attr<"Data", "data"> {
  let summary = "a data source";
  let description = [{
    `#md.data<tokens, "data/train.bin">`, `#md.data<npy, "x.npy">` or
    `#md.data<synthetic, "">`. The shapes of a batch are the forward
    function's argument shapes; the sampler gives every rank disjoint,
    equally many samples.
  }];
  let parameters = (ins "::md::DataKind":$kind, StringRefParameter<>:$path);
  let assemblyFormat = "`<` $kind `,` $path `>`";
}

#endif // MD_DIALECT_MDATTRS_TD
