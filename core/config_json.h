// Model configs from JSON files: napkin's own format (docs/CONFIG.md; what
// `napkin estimate --model X --json` prints under "model") and Hugging Face config.json files
// of GPT-2 ("model_type": "gpt2") and the Llama family ("llama", "mistral", "phi3", "qwen2").
// Every error is one line naming the file and the field (core/json_reader.h): "cfg.json:
// n_layer: expected a positive integer, got \"twelve\"".
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/model_config.h"

namespace napkin {

class JsonField;

// Reads, parses and validates a config file; errors name `path`. Throws UsageError for a file
// that cannot be opened, is not JSON, or holds a bad or missing field.
ModelConfig load_model_config(const std::string& path);

// Parses an already-read document (format detected from "format" or "model_type") and runs
// validate(); `source` prefixes every error and its stem is the name when the document has none.
ModelConfig model_config_from_json(const nlohmann::json& doc, const std::string& source);

// The same for a config inside another document (report.json's "model"): errors name the
// field's path and raise its source's exception; `default_name` names a config without one.
ModelConfig read_model_config(const JsonField& doc, const std::string& default_name);

// napkin's own format with every key written ("format": "napkin-model");
// model_config_from_json reads it back to an identical config.
nlohmann::json model_config_to_json(const ModelConfig& cfg);

}  // namespace napkin
