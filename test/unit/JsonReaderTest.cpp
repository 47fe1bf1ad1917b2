//===- JsonReaderTest.cpp - the JSON cursor of headers and meta.json ------===//
//
// JsonReader reads the safetensors headers and the meta.json md reads back:
// strings with their escapes, 64-bit integers, comma-separated items, and
// where reading stopped when the text is not what the reader expects.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/JsonReader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace md::runtime {
namespace {

TEST(JsonReader, DecodesEscapesAndUtf8) {
  JsonReader json(R"( "a\"b\\c\/\n\t\u0041\u00e9\u20ac" )");
  std::string s;
  ASSERT_TRUE(json.string(&s));
  EXPECT_EQ(s, "a\"b\\c/\n\tA\xc3\xa9\xe2\x82\xac");
  EXPECT_TRUE(json.done());
}

TEST(JsonReader, RefusesUnterminatedStrings) {
  std::string s;
  JsonReader open(R"("abc)");
  EXPECT_FALSE(open.string(&s));
  JsonReader escape(R"("abc\)");
  EXPECT_FALSE(escape.string(&s));
  JsonReader shortUnicode(R"("\u00")");
  EXPECT_FALSE(shortUnicode.string(&s));
  JsonReader notString("12");
  EXPECT_FALSE(notString.string(&s));
  EXPECT_EQ(notString.offset(), 0u);
}

TEST(JsonReader, ReadsIntegersThatFitAndRefusesOverflow) {
  int64_t v = 0;
  JsonReader max(" 9223372036854775807");
  ASSERT_TRUE(max.integer(&v));
  EXPECT_EQ(v, std::numeric_limits<int64_t>::max());
  JsonReader negative("-42,");
  ASSERT_TRUE(negative.integer(&v));
  EXPECT_EQ(v, -42);
  EXPECT_TRUE(negative.eat(','));
  JsonReader overflow("9223372036854775808");
  EXPECT_FALSE(overflow.integer(&v));
  JsonReader sign("-");
  EXPECT_FALSE(sign.integer(&v));
  JsonReader word("true");
  EXPECT_FALSE(word.integer(&v));
}

TEST(JsonReader, ReadsItemsUpToTheirClose) {
  std::vector<int64_t> xs;
  JsonReader array("[1, 2 ,3] ");
  ASSERT_TRUE(array.intArray(&xs));
  EXPECT_EQ(xs, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(array.done());
  JsonReader empty("[ ]");
  ASSERT_TRUE(empty.intArray(&xs));
  EXPECT_TRUE(xs.empty());
  JsonReader trailingComma("[1,]");
  EXPECT_FALSE(trailingComma.intArray(&xs));
  JsonReader unclosed("[1 2]");
  EXPECT_FALSE(unclosed.intArray(&xs));
  EXPECT_EQ(unclosed.offset(), 3u);

  JsonReader object(R"({"a": null, "b": 7})");
  ASSERT_TRUE(object.eat('{'));
  std::vector<std::string> keys;
  ASSERT_TRUE(object.items('}', [&] {
    std::string key;
    int64_t v = 0;
    if (!object.string(&key) || !object.eat(':'))
      return false;
    keys.push_back(key);
    return object.literal("null") || object.integer(&v);
  }));
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(object.done());
}

TEST(JsonReader, LiteralsAndPeekConsumeOnlyWhatMatches) {
  JsonReader json("  nul");
  EXPECT_FALSE(json.literal("null"));
  EXPECT_EQ(json.offset(), 2u);
  EXPECT_TRUE(json.peek('n'));
  EXPECT_FALSE(json.peek('x'));
  EXPECT_EQ(json.offset(), 2u);
  EXPECT_FALSE(json.done());
}

} // namespace
} // namespace md::runtime
