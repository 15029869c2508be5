// FlatStringMap: an open-addressing hash map from strings to values, for the
// vocabulary lookups on the encode hot path (every candidate piece of every
// word). Keys live in one string pool; slots keep the full 64-bit hash, so a
// probe compares 8 bytes before touching the key. Insert overwrites (the last
// duplicate wins, as in the reference's hash maps). No erase.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tokenizer {

inline uint64_t hash_bytes(const char* p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        std::memcpy(&w, p, n);
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h | 1;  // 0 marks an empty slot
}

template <class V>
class FlatStringMap {
public:
    FlatStringMap() { rehash(16); }

    size_t size() const { return size_; }
    void clear() {
        for (Slot& s : slots_) s.hash = 0;
        values_.clear();
        pool_.clear();
        size_ = 0;
    }

    const V* find(std::string_view key) const {
        const uint64_t h = hash_bytes(key.data(), key.size());
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.hash == 0) return nullptr;
            if (s.hash == h && s.len == key.size() && std::memcmp(pool_.data() + s.off, key.data(), key.size()) == 0)
                return &values_[s.value];
        }
    }

    V& insert(std::string_view key, V value) {
        if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
        const uint64_t h = hash_bytes(key.data(), key.size());
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.hash == 0) {
                s.hash = h;
                s.off = pool_.size();
                s.len = static_cast<uint32_t>(key.size());
                s.value = static_cast<uint32_t>(values_.size());
                pool_.append(key.data(), key.size());
                values_.push_back(std::move(value));
                ++size_;
                return values_.back();
            }
            if (s.hash == h && s.len == key.size() && std::memcmp(pool_.data() + s.off, key.data(), key.size()) == 0) {
                values_[s.value] = std::move(value);
                return values_[s.value];
            }
        }
    }

private:
    struct Slot {
        uint64_t hash = 0;
        size_t off = 0;
        uint32_t len = 0;
        uint32_t value = 0;
    };
    void rehash(size_t n) {
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(n, Slot{});
        mask_ = n - 1;
        for (const Slot& s : old) {
            if (s.hash == 0) continue;
            size_t i = s.hash & mask_;
            while (slots_[i].hash != 0) i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }
    std::vector<Slot> slots_;
    std::vector<V> values_;
    std::string pool_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

}  // namespace loom::tokenizer
