// ModelCatalog (built-in JSON compiled into the binary) and resolve_model.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "internal.hpp"
#include "trainplan/core/error.hpp"
#include "trainplan/core/strings.hpp"

namespace trainplan::models {

ModelCatalog ModelCatalog::from_texts(const std::vector<std::pair<std::string, std::string>>& files) {
  ModelCatalog catalog;
  std::map<std::string, std::string> defined_in;
  for (const auto& [file, text] : files) {
    for (auto& spec : parse_model_file(text, file)) {
      auto [it, inserted] = defined_in.emplace(spec.name, file);
      if (!inserted)
        throw Error(fmt::format("model \"{}\" is defined twice", spec.name))
            .at(file, spec.pointer + "/name")
            .hint("it is already defined in " + it->second + "; give one of them another name");
      catalog.specs_.push_back(std::move(spec));
    }
  }
  return catalog;
}

const ModelCatalog& ModelCatalog::builtin() {
  static const ModelCatalog catalog = [] {
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& [path, text] : detail::embedded_catalog_files()) files.emplace_back(path, text);
    return from_texts(files);
  }();
  return catalog;
}

bool ModelCatalog::has(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return true;
  return false;
}

const ModelSpec& ModelCatalog::spec(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return s;
  throw Error(fmt::format("unknown model \"{}\"", name))
      .hint(suggestion(name, names()) +
            "; `trainplan model` lists the catalog, and a path to a Hugging Face config.json or a model JSON file also works");
}

std::vector<std::string> ModelCatalog::names() const {
  std::vector<std::string> out;
  out.reserve(specs_.size());
  for (const auto& s : specs_) out.push_back(s.name);
  return out;
}

ModelSpec resolve_model(const std::string& name_or_path) {
  const ModelCatalog& catalog = ModelCatalog::builtin();
  if (catalog.has(name_or_path)) return catalog.spec(name_or_path);
  std::error_code ec;
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (!std::filesystem::is_regular_file(name_or_path, ec)) {
    if (looks_like_path) (void)json::read_text_file(name_or_path);  // throws "cannot open the file"
    return catalog.spec(name_or_path);                              // throws "unknown model"
  }
  const std::string text = json::read_text_file(name_or_path);
  const json::Json doc = json::parse_text(text, name_or_path);
  if (doc.is_object() && doc.contains("model_type")) return import_hf_config(name_or_path);
  std::vector<ModelSpec> specs = parse_model_file(text, name_or_path);
  if (specs.size() != 1) {
    std::vector<std::string> names;
    for (const auto& s : specs) names.push_back(s.name);
    throw Error(fmt::format("the file holds {} models, not one", specs.size()))
        .at(name_or_path)
        .hint(specs.empty() ? "add a model to \"models\""
                            : "keep one model per file to use it by path (found: " + join(names, ", ") + ")");
  }
  return specs.front();
}

}  // namespace trainplan::models
