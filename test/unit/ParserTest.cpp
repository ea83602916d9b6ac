#include <gtest/gtest.h>
TEST(Parser, Placeholder) {}
