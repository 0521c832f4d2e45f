// Reading the harnesses' binary input.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename T>
static std::vector<T> read(FILE* f, int64_t len) {
    std::vector<T> v(len);
    if (len > 0 && fread(v.data(), sizeof(T), len, f) != (size_t)len) {
        fprintf(stderr, "short input\n");
        std::exit(2);
    }
    return v;
}
