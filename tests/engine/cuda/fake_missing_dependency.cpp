// A library the FAKE_KIND 4 module needs and the loader cannot find (no run path leads to it).
extern "C" __attribute__((visibility("default"))) int es_fake_missing_dependency() { return 0; }
