//===- Check.cpp - the static desync check of .mdl files, for CI ---------===//
//
// For every file and every plan: parse once, generate the IR for the plan,
// verify it, and run the desync check (passes/VerifyCollectives.h) on each
// `md.model`. Every diagnostic, the frontend's included, becomes a Finding
// with plain file/line/column positions; a finding that several plans share
// is reported once, with the plans it applies to. The findings are then
// printed as compiler diagnostics, JSON or SARIF 2.1.0.
//
//===----------------------------------------------------------------------===//

#include "compile/Check.h"

#include "compile/Compile.h"
#include "compile/Pipeline.h"
#include "compile/Source.h"
#include "dialect/MdOps.h"
#include "frontend/Diagnostics.h"
#include "frontend/Parser.h"
#include "passes/Passes.h"
#include "passes/VerifyCollectives.h"
#include "passes/analysis/RankVariance.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"

using namespace md;
using llvm::SMDiagnostic;
using llvm::SourceMgr;
using llvm::StringRef;

namespace {

/// The rule of the frontend's (and the IR verifier's) diagnostics.
constexpr StringRef kErrorRule = "mdl/error";
constexpr StringRef kWarningRule = "mdl/warning";

struct SourcePos {
  std::string file;
  unsigned line = 0; // 0: the whole file
  unsigned column = 0;
};

struct Note {
  SourcePos pos;
  std::string message;
};

struct Finding {
  std::string rule;
  bool error = true;
  std::string message;
  SourcePos pos;
  std::vector<Note> notes;
  std::string fix;
  /// The plans it was found under (empty: the program without a plan).
  std::vector<std::string> plans;

  /// What makes two findings of different plans the same finding.
  std::string key() const {
    std::string key;
    llvm::raw_string_ostream os(key);
    os << rule << '\0' << error << '\0' << message << '\0' << pos.file << ':'
       << pos.line << ':' << pos.column << '\0' << fix;
    for (const Note &note : notes)
      os << '\0' << note.pos.file << ':' << note.pos.line << ':'
         << note.pos.column << ':' << note.message;
    return key;
  }
};

SourcePos toPos(mlir::Location loc) {
  if (auto file = llvm::dyn_cast<mlir::FileLineColLoc>(loc))
    return {file.getFilename().str(), file.getLine(), file.getColumn()};
  if (auto name = llvm::dyn_cast<mlir::NameLoc>(loc))
    return toPos(name.getChildLoc());
  if (auto call = llvm::dyn_cast<mlir::CallSiteLoc>(loc))
    return toPos(call.getCallee());
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location inner : fused.getLocations()) {
      SourcePos pos = toPos(inner);
      if (pos.line)
        return pos;
    }
  return {};
}

/// The findings of one file.
struct FileReport {
  std::string path;
  std::vector<std::string> plans;
  std::vector<Finding> findings;
  SourceMgr sourceMgr;
  unsigned bufferId = 0;

  std::string plan; // the plan being checked
  llvm::StringMap<size_t> index;

  /// Adds `finding` under the current plan, or adds the plan to an equal
  /// finding another plan found.
  void add(Finding finding) {
    auto [it, inserted] = index.try_emplace(finding.key(), findings.size());
    if (inserted) {
      if (!plan.empty())
        finding.plans.push_back(plan);
      findings.push_back(std::move(finding));
    } else if (!plan.empty() &&
               !llvm::is_contained(findings[it->second].plans, plan)) {
      findings[it->second].plans.push_back(plan);
    }
  }

  /// Diagnostics arrive one at a time, notes after their error; they are
  /// added once the next error starts or the run ends.
  std::optional<Finding> pending;
  void flush() {
    if (pending)
      add(std::move(*pending));
    pending.reset();
  }
  void start(Finding finding) {
    flush();
    pending = std::move(finding);
  }
  void note(Note note) {
    if (pending)
      pending->notes.push_back(std::move(note));
  }
};

/// The SourceMgr handler of the frontend's diagnostics.
void collectFrontendDiagnostic(const SMDiagnostic &diag, void *context) {
  auto *report = static_cast<FileReport *>(context);
  SourcePos pos{
      diag.getFilename().str(),
      diag.getLineNo() > 0 ? static_cast<unsigned>(diag.getLineNo()) : 0u,
      diag.getColumnNo() >= 0 ? static_cast<unsigned>(diag.getColumnNo()) + 1
                              : 0u};
  if (pos.line == 0)
    pos.column = 0;
  switch (diag.getKind()) {
  case SourceMgr::DK_Error:
  case SourceMgr::DK_Warning: {
    Finding finding;
    finding.error = diag.getKind() == SourceMgr::DK_Error;
    finding.rule = (finding.error ? kErrorRule : kWarningRule).str();
    finding.message = diag.getMessage().str();
    finding.pos = pos;
    report->start(std::move(finding));
    return;
  }
  case SourceMgr::DK_Note:
    report->note({pos, diag.getMessage().str()});
    return;
  case SourceMgr::DK_Remark:
    return;
  }
}

Finding toFinding(const DesyncFinding &desync) {
  Finding finding;
  finding.rule = getDesyncRuleId(desync.rule).str();
  finding.message = desync.message;
  finding.pos = toPos(desync.loc);
  for (const DesyncNote &note : desync.notes)
    finding.notes.push_back({toPos(note.loc), note.message});
  finding.fix = desync.fix;
  return finding;
}

std::vector<std::string> resolvePlans(StringRef plan,
                                      const frontend::Module &module) {
  if (plan != "all")
    return {plan.str()};
  std::vector<std::string> names;
  for (StringRef preset : frontend::getBuiltinPlanNames())
    names.push_back(preset.str());
  for (const frontend::PlanDecl &decl : module.plans)
    if (!llvm::is_contained(names, decl.name))
      names.push_back(decl.name);
  return names;
}

/// Runs the frontend and the check on one file under each plan.
void checkFile(FileReport &report, const CheckOptions &options,
               mlir::MLIRContext &context) {
  llvm::ErrorOr<Source> source = readSource(report.path);
  if (std::error_code ec = source.getError()) {
    Finding finding;
    finding.rule = kErrorRule.str();
    finding.message = "cannot open: " + ec.message();
    finding.pos.file = report.path;
    report.add(std::move(finding));
    return;
  }
  report.bufferId = addSource(*source, report.sourceMgr);
  report.sourceMgr.setDiagHandler(collectFrontendDiagnostic, &report);
  frontend::Diagnostics diags(report.sourceMgr, llvm::nulls());
  diags.setErrorLimit(options.errorLimit);

  std::unique_ptr<frontend::Module> module =
      frontend::parseModule(report.bufferId, diags);
  report.flush();
  if (diags.hasErrors() || !module)
    return;

  // The IR verifier's diagnostics, should the frontend build invalid IR.
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() != mlir::DiagnosticSeverity::Error &&
        diag.getSeverity() != mlir::DiagnosticSeverity::Warning)
      return mlir::success();
    Finding finding;
    finding.error = diag.getSeverity() == mlir::DiagnosticSeverity::Error;
    finding.rule = (finding.error ? kErrorRule : kWarningRule).str();
    finding.message = diag.str();
    finding.pos = toPos(diag.getLocation());
    if (finding.pos.file.empty())
      finding.pos.file = report.path;
    for (mlir::Diagnostic &note : diag.getNotes())
      finding.notes.push_back({toPos(note.getLocation()), note.str()});
    report.start(std::move(finding));
    return mlir::success();
  });

  // Without --plan, one run of the program without a plan attribute.
  std::vector<std::string> runs{""};
  if (!options.plan.empty())
    runs = report.plans = resolvePlans(options.plan, *module);
  for (const std::string &plan : runs) {
    report.plan = plan;
    frontend::IRGenOptions irgen = options.irgen;
    irgen.plan = plan;
    unsigned errorsBefore = diags.getNumErrors();
    mlir::OwningOpRef<mlir::ModuleOp> ir =
        frontend::generateIR(*module, context, irgen, diags);
    report.flush();
    if (!ir || diags.getNumErrors() != errorsBefore)
      continue;
    if (mlir::failed(mlir::verify(*ir))) {
      report.flush();
      Finding finding;
      finding.rule = kErrorRule.str();
      finding.message = "internal error: the generated IR does not verify";
      finding.pos.file = report.path;
      report.add(std::move(finding));
      continue;
    }
    // What compiling runs after the desync check's passes, on the IR as the
    // frontend built it.
    mlir::OwningOpRef<mlir::ModuleOp> whole;
    if (!plan.empty())
      whole = ir->clone();
    // SyncBatchNorm's all-reduces are collectives of the forward, which
    // `evaluate` runs: the check names them.
    mlir::PassManager pm(&context);
    pm.nest<ModelOp>().addPass(createSyncBatchNorm());
    if (mlir::failed(pm.run(*ir))) {
      report.flush();
      continue;
    }
    unsigned desyncErrors = 0;
    for (ModelOp model : ir->getOps<ModelOp>()) {
      RankVariance variance(model);
      if (!variance.succeeded()) {
        Finding finding;
        finding.rule = kErrorRule.str();
        finding.message = "internal error: the rank-variance analysis failed";
        finding.pos = toPos(model.getLoc());
        report.add(std::move(finding));
        continue;
      }
      for (const DesyncFinding &desync : checkDesync(model, variance)) {
        ++desyncErrors; // every desync finding is an error
        report.add(toFinding(desync));
      }
    }
    // One verdict: under a plan, everything else compiling would refuse
    // (a parameter that gets no gradient, a plan md-apply-plan cannot
    // carry out, ...) is a finding too, from md's training pipeline on
    // the plan's IR. A program the desync check refused is not compiled
    // on: its errors are the check's.
    bool trains = llvm::all_of(ir->getOps<ModelOp>(),
                               [](ModelOp model) { return model.getTrain(); });
    if (!plan.empty() && desyncErrors == 0 && trains) {
      mlir::PassManager compile(&context);
      buildTrainingPipeline(compile);
      (void)compile.run(*whole);
      report.flush();
    }
  }
  report.flush();
}

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

void printDiagnostic(FileReport &report, const SourcePos &pos,
                     SourceMgr::DiagKind kind, const std::string &message,
                     llvm::raw_ostream &os) {
  const llvm::MemoryBuffer *buffer =
      report.bufferId ? report.sourceMgr.getMemoryBuffer(report.bufferId)
                      : nullptr;
  if (pos.line && buffer && buffer->getBufferIdentifier() == pos.file) {
    llvm::SMLoc loc = report.sourceMgr.FindLocForLineAndColumn(
        report.bufferId, pos.line, pos.column);
    if (loc.isValid()) {
      report.sourceMgr.GetMessage(loc, kind, message).print(nullptr, os);
      return;
    }
  }
  SMDiagnostic(pos.file, kind, message).print(nullptr, os);
}

std::string joinPlans(const std::vector<std::string> &plans) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(plans, os);
  return text;
}

void printText(std::vector<std::unique_ptr<FileReport>> &reports,
               llvm::raw_ostream &err) {
  for (std::unique_ptr<FileReport> &report : reports)
    for (const Finding &finding : report->findings) {
      printDiagnostic(*report, finding.pos,
                      finding.error ? SourceMgr::DK_Error
                                    : SourceMgr::DK_Warning,
                      finding.message, err);
      for (const Note &note : finding.notes)
        printDiagnostic(*report, note.pos, SourceMgr::DK_Note, note.message,
                        err);
      if (!finding.fix.empty())
        SMDiagnostic("", SourceMgr::DK_Note, "fix: " + finding.fix)
            .print(nullptr, err);
      if (report->plans.size() > 1 && !finding.plans.empty() &&
          finding.plans.size() < report->plans.size())
        SMDiagnostic("", SourceMgr::DK_Note,
                     "under plans: " + joinPlans(finding.plans))
            .print(nullptr, err);
    }
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

void writePos(llvm::json::OStream &json, const SourcePos &pos) {
  json.attribute("file", pos.file);
  json.attribute("line", static_cast<int64_t>(pos.line));
  json.attribute("column", static_cast<int64_t>(pos.column));
}

void writeStrings(llvm::json::OStream &json, StringRef key,
                  const std::vector<std::string> &values) {
  json.attributeArray(key, [&] {
    for (const std::string &value : values)
      json.value(value);
  });
}

void printJSON(std::vector<std::unique_ptr<FileReport>> &reports,
               unsigned errors, unsigned warnings, llvm::raw_ostream &out) {
  llvm::json::OStream json(out, 2);
  json.object([&] {
    json.attribute("version", 1);
    json.attributeArray("files", [&] {
      for (std::unique_ptr<FileReport> &report : reports)
        json.object([&] {
          json.attribute("path", report->path);
          writeStrings(json, "plans", report->plans);
        });
    });
    json.attributeArray("findings", [&] {
      for (std::unique_ptr<FileReport> &report : reports)
        for (const Finding &finding : report->findings)
          json.object([&] {
            json.attribute("rule", finding.rule);
            json.attribute("level", finding.error ? "error" : "warning");
            json.attribute("message", finding.message);
            writePos(json, finding.pos);
            json.attributeArray("notes", [&] {
              for (const Note &note : finding.notes)
                json.object([&] {
                  json.attribute("message", note.message);
                  writePos(json, note.pos);
                });
            });
            json.attribute("fix", finding.fix);
            writeStrings(json, "plans", finding.plans);
          });
    });
    json.attribute("errors", static_cast<int64_t>(errors));
    json.attribute("warnings", static_cast<int64_t>(warnings));
  });
  out << "\n";
}

//===----------------------------------------------------------------------===//
// SARIF 2.1.0
//===----------------------------------------------------------------------===//

struct SarifRule {
  std::string id;
  std::string summary;
};

std::vector<SarifRule> getSarifRules() {
  std::vector<SarifRule> rules;
  for (DesyncRule rule : getDesyncRules())
    rules.push_back(
        {getDesyncRuleId(rule).str(), getDesyncRuleSummary(rule).str()});
  rules.push_back({kErrorRule.str(),
                   "an error in the program: syntax, names, shapes, the "
                   "recipe or a plan"});
  rules.push_back({kWarningRule.str(), "a warning about the program"});
  return rules;
}

/// A file path as a SARIF URI reference: forward slashes, relative paths as
/// given (CI tools resolve them against the checkout), and every byte a URI
/// path cannot hold percent-encoded.
std::string toUri(StringRef path) {
  std::string uri;
  for (char c : path) {
    if (c == '\\')
      c = '/';
    if (llvm::isAlnum(c) || StringRef("-._~/!$&'()*+,;=:@").contains(c)) {
      uri += c;
      continue;
    }
    uri += '%';
    uri += llvm::hexdigit(static_cast<unsigned char>(c) >> 4);
    uri += llvm::hexdigit(static_cast<unsigned char>(c) & 15);
  }
  return uri;
}

void writeSarifLocation(llvm::json::OStream &json, const SourcePos &pos) {
  json.attributeObject("physicalLocation", [&] {
    json.attributeObject("artifactLocation",
                         [&] { json.attribute("uri", toUri(pos.file)); });
    if (pos.line)
      json.attributeObject("region", [&] {
        json.attribute("startLine", static_cast<int64_t>(pos.line));
        if (pos.column)
          json.attribute("startColumn", static_cast<int64_t>(pos.column));
      });
  });
}

void printSARIF(std::vector<std::unique_ptr<FileReport>> &reports,
                llvm::raw_ostream &out) {
  std::vector<SarifRule> rules = getSarifRules();
  llvm::json::OStream json(out, 2);
  json.object([&] {
    json.attribute("version", "2.1.0");
    json.attribute("$schema", "https://docs.oasis-open.org/sarif/sarif/v2.1.0/"
                              "errata01/os/schemas/sarif-schema-2.1.0.json");
    json.attributeArray("runs", [&] {
      json.object([&] {
        json.attributeObject("tool", [&] {
          json.attributeObject("driver", [&] {
            json.attribute("name", "md");
            json.attributeArray("rules", [&] {
              for (const SarifRule &rule : rules)
                json.object([&] {
                  json.attribute("id", rule.id);
                  json.attributeObject("shortDescription", [&] {
                    json.attribute("text", rule.summary);
                  });
                });
            });
          });
        });
        json.attributeArray("results", [&] {
          for (std::unique_ptr<FileReport> &report : reports)
            for (const Finding &finding : report->findings)
              json.object([&] {
                auto rule = llvm::find_if(rules, [&](const SarifRule &r) {
                  return r.id == finding.rule;
                });
                json.attribute("ruleId", finding.rule);
                json.attribute("ruleIndex",
                               static_cast<int64_t>(rule - rules.begin()));
                json.attribute("level", finding.error ? "error" : "warning");
                json.attributeObject("message", [&] {
                  std::string text = finding.message;
                  if (!finding.fix.empty())
                    text += "\nfix: " + finding.fix;
                  json.attribute("text", text);
                });
                json.attributeArray("locations", [&] {
                  json.object([&] { writeSarifLocation(json, finding.pos); });
                });
                json.attributeArray("relatedLocations", [&] {
                  for (auto [i, note] : llvm::enumerate(finding.notes))
                    json.object([&] {
                      json.attribute("id", static_cast<int64_t>(i + 1));
                      json.attributeObject("message", [&] {
                        json.attribute("text", note.message);
                      });
                      writeSarifLocation(json, note.pos);
                    });
                });
                json.attributeObject("properties", [&] {
                  json.attribute("fix", finding.fix);
                  writeStrings(json, "plans", finding.plans);
                });
              });
        });
      });
    });
  });
  out << "\n";
}

} // namespace

CheckSummary md::runCheck(const CheckOptions &options, llvm::raw_ostream &out,
                          llvm::raw_ostream &err) {
  std::unique_ptr<mlir::MLIRContext> context =
      createCompilerContext(mlir::MLIRContext::Threading::DISABLED);
  // A pass's diagnostic points at the .mdl line; the IR it came from is
  // noise (as when compiling).
  context->printOpOnDiagnostic(false);

  std::vector<std::unique_ptr<FileReport>> reports;
  for (const std::string &path : options.files) {
    auto report = std::make_unique<FileReport>();
    report->path = path;
    checkFile(*report, options, *context);
    reports.push_back(std::move(report));
  }

  unsigned errors = 0, warnings = 0;
  std::vector<std::string> plans;
  for (std::unique_ptr<FileReport> &report : reports) {
    for (const Finding &finding : report->findings)
      ++(finding.error ? errors : warnings);
    for (const std::string &plan : report->plans)
      if (!llvm::is_contained(plans, plan))
        plans.push_back(plan);
  }

  switch (options.format) {
  case CheckFormat::Text: {
    printText(reports, err);
    err.flush();
    out << "mdc --check: " << reports.size() << " file"
        << (reports.size() == 1 ? "" : "s");
    if (!plans.empty())
      out << " under " << plans.size() << " plan"
          << (plans.size() == 1 ? "" : "s");
    out << ": " << errors << " error" << (errors == 1 ? "" : "s") << ", "
        << warnings << " warning" << (warnings == 1 ? "" : "s") << "\n";
    break;
  }
  case CheckFormat::JSON:
    printJSON(reports, errors, warnings, out);
    break;
  case CheckFormat::SARIF:
    printSARIF(reports, out);
    break;
  }
  out.flush();
  return {errors, warnings};
}
