// SentencePiece models (tokenizer.model without a tokenizer.json, as older
// Llama 2 / Mistral folders ship), through libsentencepiece itself, so the
// encoding is the reference one.
#include <sentencepiece_processor.h>

#include "text/tokenizer.h"

namespace cohort::text {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp, bool bos, bool eos)
      : sp_(std::move(sp)), add_bos_(bos), add_eos_(eos) {}
  std::vector<int32_t> encode(const std::string& text) override {
    std::vector<int> ids;
    sp_->Encode(text, &ids).IgnoreError();
    return std::vector<int32_t>(ids.begin(), ids.end());
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &out).IgnoreError();
    return out;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= sp_->GetPieceSize()) return "";
    return vocabulary_piece_bytes(sp_->IdToPiece(id));
  }
  int vocab_size() const override { return sp_->GetPieceSize(); }
  std::optional<int32_t> token_id(const std::string& token) const override {
    const int id = sp_->PieceToId(token);
    if (id == sp_->unk_id() && token != sp_->IdToPiece(id)) return std::nullopt;
    return id;
  }
  bool is_special(int32_t id) const override {
    return id >= 0 && id < sp_->GetPieceSize() && (sp_->IsControl(id) || sp_->IsUnknown(id));
  }
  std::vector<int32_t> prefix_tokens() const override {
    if (add_bos_ && sp_->bos_id() >= 0) return {sp_->bos_id()};
    return {};
  }
  std::vector<int32_t> suffix_tokens() const override {
    if (add_eos_ && sp_->eos_id() >= 0) return {sp_->eos_id()};
    return {};
  }
  std::unique_ptr<Tokenizer> clone() const override {
    return std::make_unique<SentencePieceTokenizer>(sp_, add_bos_, add_eos_);
  }

 private:
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;  // thread-safe for encoding
  bool add_bos_, add_eos_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path, bool add_bos, bool add_eos) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok()) return invalid_argument(path + ": not a SentencePiece model (" + status.ToString() + ")");
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(sp), add_bos, add_eos));
}

}  // namespace cohort::text
