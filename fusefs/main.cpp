#include "fusefs/mount.h"

int main(int argc, char** argv) { return h5d::fusefs::run_mount(argc, argv); }
