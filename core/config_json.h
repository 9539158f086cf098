// Model configs from JSON files: napkin's own format (docs/CONFIG.md; what
// `napkin estimate --model X --json` prints under "model") and Hugging Face config.json files
// of GPT-2 ("model_type": "gpt2") and Llama ("model_type": "llama") models.
// Every error is a UsageError naming the file and the field: "cfg.json: field 'n_layer':
// expected a positive integer (got \"twelve\")".
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/model_config.h"

namespace napkin {

// Reads and validates a config file. `source` defaults to the path in error messages.
ModelConfig load_model_config(const std::string& path);

// Parses an already-read document; `source` names it in errors.
ModelConfig model_config_from_json(const nlohmann::json& doc, const std::string& source);

// napkin's own format, which model_config_from_json reads back unchanged.
nlohmann::json model_config_to_json(const ModelConfig& cfg);

}  // namespace napkin
