// A double-precision GPT forward, written as plainly as possible and independently of the
// engine and its kernels: the reference the engine's loss is checked against and the function
// the whole-model finite-difference gradient check differentiates (tests/engine/gpt_test.cpp).
// Parameters are read by the engine's names (param_tensors()), widened to double. A linear
// layer with LoRA adapters ("<name>.lora_a", "<name>.lora_b" present) adds
// lora_scale * (x A_p^T) B_p^T for each of its parts p (q, k, v of qkv; gate, up of SwiGLU's fc).
// With the config's dropout > 0: the masks of kernels/dropout.h for the micro-batch seed given
// (set_dropout), on the embedding output, the attention probabilities and both residual branches.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "kernels/dropout.h"

namespace napkin::test {

using Params = std::map<std::string, std::vector<double>>;

class ReferenceGpt {
public:
    explicit ReferenceGpt(const ModelConfig& c, double lora_scale = 0.0) : c_(c), lora_scale_(lora_scale) {}
    void set_dropout(std::uint64_t micro_batch_seed) { dropout_seed_ = micro_batch_seed; }

    // Mean cross-entropy over the B*T positions.
    double loss(const Params& p, const std::vector<std::int32_t>& inputs, const std::vector<std::int32_t>& targets,
                std::int64_t B, std::int64_t T) const {
        const std::int64_t N = B * T;
        const auto xf = final_norm(p, inputs, B, T);
        double total = 0;
        for (std::int64_t r = 0; r < N; ++r) {
            const std::vector<double> logits = row_logits(p, xf, r);
            double maxv = -1e300;
            for (double lg : logits) maxv = std::max(maxv, lg);
            double sum = 0;
            for (double lg : logits) sum += std::exp(lg - maxv);
            total += maxv + std::log(sum) - logits[static_cast<std::size_t>(targets[static_cast<std::size_t>(r)])];
        }
        return total / static_cast<double>(N);
    }

    // The logits (B, V) of each sequence's last position, as a forward over the whole (B, T)
    // sequences computes them (no cache): napkin generate's reference.
    std::vector<double> last_logits(const Params& p, const std::vector<std::int32_t>& inputs, std::int64_t B,
                                    std::int64_t T) const {
        const auto xf = final_norm(p, inputs, B, T);
        std::vector<double> out;
        for (std::int64_t b = 0; b < B; ++b) {
            const std::vector<double> logits = row_logits(p, xf, b * T + T - 1);
            out.insert(out.end(), logits.begin(), logits.end());
        }
        return out;
    }

private:
    // The blocks and ln_f over (B, T) tokens: (B T, C).
    std::vector<double> final_norm(const Params& p, const std::vector<std::int32_t>& inputs, std::int64_t B,
                                   std::int64_t T) const {
        const std::int64_t C = c_.d_model, N = B * T;
        std::vector<double> x(static_cast<std::size_t>(N * C));
        const auto& wte = p.at("wte");
        for (std::int64_t b = 0; b < B; ++b) {
            for (std::int64_t t = 0; t < T; ++t) {
                const std::int64_t row = b * T + t, tok = inputs[static_cast<std::size_t>(row)];
                for (std::int64_t k = 0; k < C; ++k) {
                    double v = wte[static_cast<std::size_t>(tok * C + k)];
                    if (c_.positions == PositionKind::learned) v += p.at("wpe")[static_cast<std::size_t>(t * C + k)];
                    x[static_cast<std::size_t>(row * C + k)] = v;
                }
            }
        }
        drop(x, -1, DropoutSite::embedding);
        for (int l = 0; l < c_.n_layers; ++l) {
            const std::string h = "h." + std::to_string(l) + ".";
            const auto n1 = norm(p, h + "ln_1", x, N);
            auto qkv = linear(p, h + "attn.qkv", n1, N, C, c_.qkv_dim());
            if (c_.positions == PositionKind::rope) rope(qkv, B, T);
            const auto att = attention(qkv, B, T, l);
            auto y = linear(p, h + "attn.proj", att, N, C, C);
            drop(y, l, DropoutSite::attention_residual);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
            const auto n2 = norm(p, h + "ln_2", x, N);
            const std::int64_t fc_rows = c_.mlp == MlpKind::swiglu ? 2 * c_.d_ff : c_.d_ff;
            const auto fc = linear(p, h + "mlp.fc", n2, N, C, fc_rows);
            std::vector<double> a(static_cast<std::size_t>(N * c_.d_ff));
            for (std::int64_t r = 0; r < N; ++r) {
                for (std::int64_t j = 0; j < c_.d_ff; ++j) {
                    if (c_.mlp == MlpKind::gelu) {
                        const double u = fc[static_cast<std::size_t>(r * fc_rows + j)];
                        a[static_cast<std::size_t>(r * c_.d_ff + j)] =
                            0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
                    } else {
                        const double g = fc[static_cast<std::size_t>(r * fc_rows + j)];
                        const double up = fc[static_cast<std::size_t>(r * fc_rows + c_.d_ff + j)];
                        a[static_cast<std::size_t>(r * c_.d_ff + j)] = g / (1 + std::exp(-g)) * up;
                    }
                }
            }
            auto y2 = linear(p, h + "mlp.proj", a, N, c_.d_ff, C);
            drop(y2, l, DropoutSite::mlp_residual);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] += y2[i];
        }
        return norm(p, "ln_f", x, N);
    }

    // Row r of xf against the head: (V) logits.
    std::vector<double> row_logits(const Params& p, const std::vector<double>& xf, std::int64_t r) const {
        const std::int64_t C = c_.d_model;
        const auto& head = c_.tied_embeddings ? p.at("wte") : p.at("lm_head");
        std::vector<double> logits(static_cast<std::size_t>(c_.vocab_size));
        for (std::int64_t v = 0; v < c_.vocab_size; ++v) {
            double s = 0;
            for (std::int64_t k = 0; k < C; ++k) s += xf[static_cast<std::size_t>(r * C + k)] * head[static_cast<std::size_t>(v * C + k)];
            logits[static_cast<std::size_t>(v)] = s;
        }
        return logits;
    }

    std::vector<double> norm(const Params& p, const std::string& name, const std::vector<double>& x, std::int64_t N) const {
        const std::int64_t C = c_.d_model;
        const auto& w = p.at(name + ".weight");
        const bool has_bias = p.count(name + ".bias") > 0;
        std::vector<double> out(x.size());
        for (std::int64_t r = 0; r < N; ++r) {
            const double* row = &x[static_cast<std::size_t>(r * C)];
            double mean = 0, var = 0;
            if (c_.norm == NormKind::layernorm) {
                for (std::int64_t k = 0; k < C; ++k) mean += row[k] / static_cast<double>(C);
            }
            for (std::int64_t k = 0; k < C; ++k) var += (row[k] - mean) * (row[k] - mean) / static_cast<double>(C);
            const double rstd = 1 / std::sqrt(var + 1e-5);
            for (std::int64_t k = 0; k < C; ++k) {
                double v = (row[k] - mean) * rstd * w[static_cast<std::size_t>(k)];
                if (has_bias) v += p.at(name + ".bias")[static_cast<std::size_t>(k)];
                out[static_cast<std::size_t>(r * C + k)] = v;
            }
        }
        return out;
    }

    std::vector<double> linear(const Params& p, const std::string& name, const std::vector<double>& x, std::int64_t N,
                               std::int64_t K, std::int64_t M) const {
        const auto& w = p.at(name + ".weight");
        const bool has_bias = p.count(name + ".bias") > 0;
        std::vector<double> out(static_cast<std::size_t>(N * M));
        for (std::int64_t r = 0; r < N; ++r) {
            for (std::int64_t j = 0; j < M; ++j) {
                double s = has_bias ? p.at(name + ".bias")[static_cast<std::size_t>(j)] : 0.0;
                for (std::int64_t k = 0; k < K; ++k) s += x[static_cast<std::size_t>(r * K + k)] * w[static_cast<std::size_t>(j * K + k)];
                out[static_cast<std::size_t>(r * M + j)] = s;
            }
        }
        if (p.count(name + ".lora_a") > 0) add_lora(p, name, x, N, K, M, out);
        return out;
    }

    // The output rows of each adapter part: q, k, v of qkv; gate, up of SwiGLU's fc; else one.
    std::vector<std::int64_t> lora_parts(const std::string& name, std::int64_t M) const {
        if (name.ends_with("attn.qkv")) {
            const std::int64_t q = static_cast<std::int64_t>(c_.n_heads) * c_.head_dim();
            return {q, (M - q) / 2, (M - q) / 2};
        }
        if (name.ends_with("mlp.fc") && c_.mlp == MlpKind::swiglu) return {M / 2, M / 2};
        return {M};
    }

    void add_lora(const Params& p, const std::string& name, const std::vector<double>& x, std::int64_t N,
                  std::int64_t K, std::int64_t M, std::vector<double>& out) const {
        const auto& a = p.at(name + ".lora_a");  // (parts r, K)
        const auto& b = p.at(name + ".lora_b");  // (M, r)
        const std::vector<std::int64_t> parts = lora_parts(name, M);
        const auto r = static_cast<std::int64_t>(b.size()) / M;
        std::int64_t row0 = 0;
        for (std::size_t part = 0; part < parts.size(); ++part) {
            for (std::int64_t n = 0; n < N; ++n) {
                for (std::int64_t q = 0; q < r; ++q) {
                    double h = 0;
                    const std::int64_t arow = static_cast<std::int64_t>(part) * r + q;
                    for (std::int64_t k = 0; k < K; ++k) h += x[static_cast<std::size_t>(n * K + k)] * a[static_cast<std::size_t>(arow * K + k)];
                    for (std::int64_t j = row0; j < row0 + parts[part]; ++j)
                        out[static_cast<std::size_t>(n * M + j)] += lora_scale_ * h * b[static_cast<std::size_t>(j * r + q)];
                }
            }
            row0 += parts[part];
        }
    }

    // Hugging Face Llama's rotate_half convention: element i pairs with i + HD/2.
    void rope(std::vector<double>& qkv, std::int64_t B, std::int64_t T) const {
        const std::int64_t HD = c_.head_dim(), W = c_.qkv_dim();
        for (std::int64_t b = 0; b < B; ++b) {
            for (std::int64_t t = 0; t < T; ++t) {
                for (int h = 0; h < c_.n_heads + c_.n_kv_heads; ++h) {
                    double* v = &qkv[static_cast<std::size_t>((b * T + t) * W + h * HD)];
                    for (std::int64_t i = 0; i < HD / 2; ++i) {
                        const double angle = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(HD));
                        const double x0 = v[i], x1 = v[i + HD / 2];
                        v[i] = x0 * std::cos(angle) - x1 * std::sin(angle);
                        v[i + HD / 2] = x1 * std::cos(angle) + x0 * std::sin(angle);
                    }
                }
            }
        }
    }

    // Dropout in place: element i kept by the site's hash, scaled by 1 / (1 - p).
    void drop(std::vector<double>& v, int layer, DropoutSite site) const {
        if (c_.dropout <= 0) return;
        const std::uint64_t seed = dropout_site_seed(dropout_seed_, layer, site);
        const std::uint32_t threshold = dropout_threshold(static_cast<float>(c_.dropout));
        const double scale = 1.0 / (1.0 - static_cast<double>(static_cast<float>(c_.dropout)));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = dropout_keep(seed, i, threshold) ? v[i] * scale : 0.0;
    }

    std::vector<double> attention(const std::vector<double>& qkv, std::int64_t B, std::int64_t T, int layer) const {
        const std::int64_t HD = c_.head_dim(), C = c_.d_model, W = c_.qkv_dim();
        const int group = c_.n_heads / c_.n_kv_heads;
        std::vector<double> out(static_cast<std::size_t>(B * T * C));
        for (std::int64_t b = 0; b < B; ++b) {
            for (int h = 0; h < c_.n_heads; ++h) {
                const std::int64_t kh = h / group;
                for (std::int64_t t = 0; t < T; ++t) {
                    const double* q = &qkv[static_cast<std::size_t>((b * T + t) * W + h * HD)];
                    std::vector<double> s(static_cast<std::size_t>(t + 1));
                    double maxv = -1e300;
                    for (std::int64_t u = 0; u <= t; ++u) {
                        const double* k = &qkv[static_cast<std::size_t>((b * T + u) * W + C + kh * HD)];
                        double d = 0;
                        for (std::int64_t i = 0; i < HD; ++i) d += q[i] * k[i];
                        s[static_cast<std::size_t>(u)] = d / std::sqrt(static_cast<double>(HD));
                        maxv = std::max(maxv, s[static_cast<std::size_t>(u)]);
                    }
                    double sum = 0;
                    for (double& e : s) sum += (e = std::exp(e - maxv));
                    if (c_.dropout > 0) {  // P (B, NH, T, T): element (b, h, t, u)
                        const std::uint64_t seed = dropout_site_seed(dropout_seed_, layer, DropoutSite::attention);
                        const std::uint32_t threshold = dropout_threshold(static_cast<float>(c_.dropout));
                        const double scale = 1.0 / (1.0 - static_cast<double>(static_cast<float>(c_.dropout)));
                        for (std::int64_t u = 0; u <= t; ++u) {
                            const auto at = static_cast<std::uint64_t>(((b * c_.n_heads + h) * T + t) * T + u);
                            double& e = s[static_cast<std::size_t>(u)];
                            e = dropout_keep(seed, at, threshold) ? e * scale : 0.0;
                        }
                    }
                    for (std::int64_t i = 0; i < HD; ++i) {
                        double acc = 0;
                        for (std::int64_t u = 0; u <= t; ++u) {
                            const double* v = &qkv[static_cast<std::size_t>((b * T + u) * W + C + c_.kv_dim() + kh * HD)];
                            acc += s[static_cast<std::size_t>(u)] / sum * v[i];
                        }
                        out[static_cast<std::size_t>((b * T + t) * C + h * HD + i)] = acc;
                    }
                }
            }
        }
        return out;
    }

    ModelConfig c_;
    double lora_scale_ = 0.0;
    std::uint64_t dropout_seed_ = 0;
};

}  // namespace napkin::test
