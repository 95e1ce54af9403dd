#include <cstdio>
int main() { std::puts("qlens: under construction"); return 0; }
