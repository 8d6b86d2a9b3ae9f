#include <cstdio>
int main() { std::puts("h5direct: not yet built"); return 1; }
