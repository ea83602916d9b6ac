// Program loading: the prelude, the main file and its imports (read once each, cycles reported),
// then Sema.
#include "placec/frontend/Frontend.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace placec {

namespace {

/// Loads files depth-first so that every file comes after the files it imports.
class ImportLoader {
public:
  explicit ImportLoader(DiagnosticEngine &diags) : diags(diags) {}

  /// Loads the file at `path`, shown in diagnostics as `displayName`; `importLoc` is the import
  /// that names it (invalid for the main file). Returns false when the file could not be read.
  bool load(StringRef path, StringRef displayName, SMLoc importLoc,
            std::unique_ptr<MemoryBuffer> preloaded = nullptr);

  std::vector<std::unique_ptr<ast::File>> takeFiles() { return std::move(files); }

private:
  /// The maximum length of a chain of imports.
  static constexpr unsigned kMaxImportDepth = 128;

  enum class FileState { Loading, Loaded };

  DiagnosticEngine &diags;
  std::vector<std::unique_ptr<ast::File>> files;
  StringMap<FileState> states;
  /// A file whose imports are being loaded.
  struct StackEntry {
    std::string canonical;
    std::string displayName;
    SMLoc importLoc;
  };
  /// The chain of imports being loaded, for cycle notes.
  std::vector<StackEntry> stack;
};

} // namespace

bool ImportLoader::load(StringRef path, StringRef displayName, SMLoc importLoc,
                        std::unique_ptr<MemoryBuffer> preloaded) {
  // Resolve to a canonical name so that a file imported twice under two spellings is read once.
  SmallString<256> canonical;
  bool isStdin = path == "-" || path == "<stdin>";
  if (isStdin) {
    canonical = "<stdin>";
  } else if (std::error_code ec = sys::fs::real_path(path, canonical); ec && preloaded) {
    // A buffer given in memory need not exist on disk.
    canonical = path;
  } else if (ec) {
    diags.error(importLoc,
                importLoc.isValid()
                    ? Twine("cannot open imported file '") + displayName + "': " + ec.message()
                    : Twine("cannot open '") + displayName + "': " + ec.message());
    return false;
  }

  auto it = states.find(canonical);
  if (it != states.end()) {
    if (it->second == FileState::Loaded)
      return true;
    // The files of the cycle, from the one imported again to the one importing it.
    auto first = llvm::find_if(
        stack, [&](const StackEntry &entry) { return entry.canonical == canonical.str(); });
    std::string through;
    for (auto entry = std::next(first); entry != stack.end(); ++entry)
      through += (through.empty() ? " through '" : ", '") + entry->displayName + "'";
    diags.error(importLoc,
                Twine("import cycle: '") + first->displayName + "' imports itself" + through);
    for (auto entry = stack.rbegin(); entry != stack.rend(); ++entry) {
      if (entry->importLoc.isValid())
        diags.note(entry->importLoc, Twine("'") + entry->displayName + "' is imported here");
      if (entry->canonical == canonical.str())
        break;
    }
    return false;
  }
  if (stack.size() >= kMaxImportDepth) {
    diags.error(importLoc,
                Twine("imports are nested more than ") + Twine(kMaxImportDepth) + " deep");
    return false;
  }

  if (!preloaded && !isStdin && sys::fs::is_directory(canonical)) {
    diags.error(importLoc, Twine(importLoc.isValid() ? "cannot import '" : "cannot open '") +
                               displayName + "': it is a directory");
    return false;
  }
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer =
      preloaded ? std::move(preloaded)
      : isStdin ? MemoryBuffer::getSTDIN()
                : MemoryBuffer::getFile(canonical, /*IsText=*/true);
  if (!buffer) {
    diags.error(importLoc,
                Twine("cannot open '") + displayName + "': " + buffer.getError().message());
    return false;
  }
  // Name the buffer as the user wrote it for the main file, and as the import wrote it, joined to
  // the importing file's name, for imports, so diagnostics show familiar paths.
  std::unique_ptr<MemoryBuffer> named =
      MemoryBuffer::getMemBufferCopy((*buffer)->getBuffer(), displayName);
  unsigned bufferId = diags.getSourceMgr().AddNewSourceBuffer(std::move(named), importLoc);

  states[canonical] = FileState::Loading;
  stack.push_back({canonical.str().str(), displayName.str(), importLoc});
  std::unique_ptr<ast::File> file = parseBuffer(bufferId, diags);
  bool ok = file != nullptr;
  if (file) {
    SmallString<256> directory = isStdin ? SmallString<256>(".") : canonical;
    if (!isStdin)
      sys::path::remove_filename(directory);
    for (const std::unique_ptr<ast::Decl> &decl : file->decls) {
      auto *import = dyn_cast<ast::ImportDecl>(decl.get());
      if (!import)
        continue;
      if (import->path.empty()) {
        diags.error(import->pathLoc, "import path is empty");
        ok = false;
        continue;
      }
      SmallString<256> target, targetName;
      if (sys::path::is_absolute(import->path)) {
        target = import->path;
        targetName = import->path;
      } else {
        target = directory;
        sys::path::append(target, import->path);
        targetName = isStdin ? StringRef() : sys::path::parent_path(displayName);
        sys::path::append(targetName, import->path);
        sys::path::remove_dots(targetName, /*remove_dot_dot=*/true);
      }
      ok &= load(target, targetName, import->pathLoc);
    }
  }
  stack.pop_back();
  states[canonical] = FileState::Loaded;
  if (file)
    files.push_back(std::move(file));
  return ok;
}

static std::vector<std::unique_ptr<ast::File>>
parseProgramImpl(StringRef path, std::unique_ptr<MemoryBuffer> preloaded, DiagnosticEngine &diags) {
  std::vector<std::unique_ptr<ast::File>> result;
  unsigned preludeId = diags.getSourceMgr().AddNewSourceBuffer(
      MemoryBuffer::getMemBuffer(kPreludeText, kPreludeName), SMLoc());
  diags.addUncheckedBuffer(preludeId);
  std::unique_ptr<ast::File> prelude = parseBuffer(preludeId, diags);
  if (!prelude)
    return {};
  result.push_back(std::move(prelude));

  ImportLoader loader(diags);
  bool isStdin = path == "-" || path == "<stdin>";
  bool ok = loader.load(path, isStdin ? "<stdin>" : path, SMLoc(), std::move(preloaded));
  if (!ok || diags.hasErrors())
    return {};
  for (std::unique_ptr<ast::File> &file : loader.takeFiles())
    result.push_back(std::move(file));
  return result;
}

std::vector<std::unique_ptr<ast::File>> parseProgram(StringRef path, DiagnosticEngine &diags) {
  return parseProgramImpl(path, nullptr, diags);
}

std::vector<std::unique_ptr<ast::File>> parseProgram(std::unique_ptr<MemoryBuffer> buffer,
                                                     DiagnosticEngine &diags) {
  std::string path = buffer->getBufferIdentifier().str();
  return parseProgramImpl(path, std::move(buffer), diags);
}

std::unique_ptr<ir::Program> loadProgram(StringRef path, DiagnosticEngine &diags) {
  std::vector<std::unique_ptr<ast::File>> files = parseProgram(path, diags);
  if (files.empty())
    return nullptr;
  return buildProgram(files, diags);
}

} // namespace placec
