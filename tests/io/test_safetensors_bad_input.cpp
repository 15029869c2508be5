// Corrupt and hostile safetensors files: each must give one loom::Error that
// names the file and, where there is one, the tensor, and says what was
// expected. The files are built byte by byte, not by our writer.
#include <fcntl.h>
#include <unistd.h>

#include "io/batch.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace loom {
namespace {

using test::contains;
using test::error_of;
using test::safetensors_image;

class SafetensorsBadInput : public test::TempDirTest {
  protected:
    // Opens an image written to `name` and returns the error message.
    std::string open_error(const std::string& name, const std::string& image) {
        std::string p = write_bytes(name, image);
        return error_of([&] { SafetensorsFile::open(p); });
    }
    // One F32 [2, 2] tensor "w" and one I64 [2] tensor "ids": 32 data bytes.
    static std::string good_image() {
        std::string h = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[16,32]},)"
                        R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
        h.append((8 - h.size() % 8) % 8, ' ');
        return safetensors_image(h, std::string(32, '\x01'));
    }
    // An image whose header holds one entry "w" with the given JSON body.
    static std::string one_entry(const std::string& body, size_t data_bytes = 16) {
        return safetensors_image(R"({"w":)" + body + "}", std::string(data_bytes, '\0'));
    }
};

TEST_F(SafetensorsBadInput, GoodImageOpens) {
    // The baseline the truncation tests cut from must itself be valid.
    SafetensorsFile f = SafetensorsFile::open(write_bytes("good.safetensors", good_image()));
    EXPECT_EQ(f.names(), (std::vector<std::string>{"w", "ids"}));
}

TEST_F(SafetensorsBadInput, FileShorterThanEightBytes) {
    std::string msg = open_error("tiny.safetensors", std::string("\x05\0\0", 3));
    EXPECT_TRUE(contains(msg, path("tiny.safetensors")));
    EXPECT_TRUE(contains(msg, "3 bytes, too short"));
    msg = open_error("zero.safetensors", "");
    EXPECT_TRUE(contains(msg, "0 bytes, too short"));
}

TEST_F(SafetensorsBadInput, HeaderCutShort) {
    std::string image = good_image().substr(0, 40);  // 8-byte length + 32 header bytes
    std::string msg = open_error("cut_header.safetensors", image);
    EXPECT_TRUE(contains(msg, path("cut_header.safetensors")));
    EXPECT_TRUE(contains(msg, "runs past the end of the file (40 bytes"));
    EXPECT_TRUE(contains(msg, "truncated"));
}

TEST_F(SafetensorsBadInput, DataCutShort) {
    std::string full = good_image();
    std::string msg = open_error("cut_data.safetensors", full.substr(0, full.size() - 4));
    EXPECT_TRUE(contains(msg, path("cut_data.safetensors")));
    EXPECT_TRUE(contains(msg, "tensor 'ids'"));  // the tensor whose bytes are missing
    EXPECT_TRUE(contains(msg, "data_offsets [16, 32] run past the end of the data"));
    EXPECT_TRUE(contains(msg, "holds 28 bytes"));
}

TEST_F(SafetensorsBadInput, HeaderLengthPastEndOfFile) {
    std::string msg =
        open_error("huge_n.safetensors", safetensors_image("{}      ", "", uint64_t(1) << 40));
    EXPECT_TRUE(contains(msg, path("huge_n.safetensors")));
    EXPECT_TRUE(contains(msg, "header length 1099511627776 bytes runs past the end"));
    EXPECT_TRUE(contains(msg, "not a safetensors file?"));
    // A PyTorch .bin (zip) passed by mistake is recognised.
    msg = open_error("pytorch_model.bin", std::string("PK\x03\x04", 4) + std::string(60, 'z'));
    EXPECT_TRUE(contains(msg, "pytorch_model.bin"));
    EXPECT_TRUE(contains(msg, "zip archive"));
}

TEST_F(SafetensorsBadInput, HeaderLengthAboveLimit) {
    // A sparse 150 MB file whose N fits inside it but exceeds the 100 MB cap.
    std::string p = write_bytes("sparse.safetensors", safetensors_image("", "", 150'000'000));
    ASSERT_EQ(::truncate(p.c_str(), 150'000'100), 0);
    std::string msg = error_of([&] { SafetensorsFile::open(p); });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg, "exceeds the 100000000 byte limit"));
}

TEST_F(SafetensorsBadInput, InvalidJson) {
    std::string msg =
        open_error("bad_json.safetensors", safetensors_image(R"({"w":{"dtype":"F32",)", ""));
    EXPECT_TRUE(contains(msg, path("bad_json.safetensors")));
    EXPECT_TRUE(contains(msg, "is not valid JSON"));
    EXPECT_TRUE(contains(msg, "parse error"));
    // Invalid UTF-8 inside a string and NUL padding are not JSON either.
    msg = open_error("utf8.safetensors", safetensors_image("{\"w\xff\":1}", ""));
    EXPECT_TRUE(contains(msg, "is not valid JSON"));
    msg = open_error("nul.safetensors", safetensors_image(std::string("{}\0\0", 4), ""));
    EXPECT_TRUE(contains(msg, "is not valid JSON"));
}

TEST_F(SafetensorsBadInput, HeaderNotAnObject) {
    std::string msg = open_error("array.safetensors", safetensors_image("[1, 2]", ""));
    EXPECT_TRUE(contains(msg, path("array.safetensors")));
    EXPECT_TRUE(contains(msg, "header is a JSON array, expected an object"));
    msg = open_error("string.safetensors", safetensors_image("\"hi\"", ""));
    EXPECT_TRUE(contains(msg, "header is a JSON string"));
}

TEST_F(SafetensorsBadInput, EntryNotAnObject) {
    std::string msg = open_error("entry.safetensors", one_entry("[0, 16]"));
    EXPECT_TRUE(contains(msg, path("entry.safetensors") + ": tensor 'w'"));
    EXPECT_TRUE(contains(msg, "found [0,16]"));
}

TEST_F(SafetensorsBadInput, UnknownDtype) {
    std::string msg = open_error("dtype.safetensors",
                                 one_entry(R"({"dtype":"F33","shape":[4],"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, path("dtype.safetensors") + ": tensor 'w'"));
    EXPECT_TRUE(contains(msg, "unknown dtype \"F33\""));
    EXPECT_TRUE(contains(msg, "F32, BF16"));
    // A real safetensors dtype Loom cannot hold says so.
    msg = open_error("bool.safetensors",
                     one_entry(R"({"dtype":"BOOL","shape":[16],"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "tensor 'w'"));
    EXPECT_TRUE(contains(msg, "\"BOOL\" is valid safetensors but Loom cannot load it"));
    msg = open_error("dtype_int.safetensors",
                     one_entry(R"({"dtype":4,"shape":[4],"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "\"dtype\" must be a string"));
}

TEST_F(SafetensorsBadInput, DtypeAndShapeDisagreeWithByteCount) {
    std::string msg =
        open_error("count.safetensors",
                   one_entry(R"({"dtype":"F32","shape":[8,8],"data_offsets":[0,128]})", 256));
    EXPECT_TRUE(contains(msg, path("count.safetensors") + ": tensor 'w'"));
    EXPECT_TRUE(contains(msg,
                         "data_offsets [0, 128] is 128 bytes but F32 [8, 8] needs 256 "
                         "(64 elements x 4 bytes)"));
    // A scalar is one element, not zero.
    msg = open_error("scalar.safetensors",
                     one_entry(R"({"dtype":"F64","shape":[],"data_offsets":[0,0]})"));
    EXPECT_TRUE(contains(msg, "is 0 bytes but F64 [] needs 8"));
}

TEST_F(SafetensorsBadInput, OffsetsOutOfRange) {
    std::string msg =
        open_error("range.safetensors",
                   one_entry(R"({"dtype":"F32","shape":[256],"data_offsets":[0,1024]})", 256));
    EXPECT_TRUE(contains(msg, path("range.safetensors") + ": tensor 'w'"));
    EXPECT_TRUE(contains(msg, "data_offsets [0, 1024] run past the end of the data"));
    EXPECT_TRUE(contains(msg, "holds 256 bytes"));
    msg = open_error("backwards.safetensors",
                     one_entry(R"({"dtype":"U8","shape":[4],"data_offsets":[8,4]})"));
    EXPECT_TRUE(contains(msg, "tensor 'w': data_offsets [8, 4] end before begin"));
    // Offsets near 2^64 must not wrap around in the range arithmetic.
    msg = open_error("wrap.safetensors",
                     one_entry(R"({"dtype":"U8","shape":[16],)"
                               R"("data_offsets":[18446744073709551615,18446744073709551615]})"));
    EXPECT_TRUE(contains(msg, "tensor 'w'"));
    EXPECT_TRUE(contains(msg, "run past the end"));
}

TEST_F(SafetensorsBadInput, OverlappingOffsets) {
    std::string h = R"({"a":{"dtype":"F32","shape":[64],"data_offsets":[0,256]},)"
                    R"("b":{"dtype":"F32","shape":[64],"data_offsets":[128,384]}})";
    std::string msg = open_error("overlap.safetensors", safetensors_image(h, std::string(384, 0)));
    EXPECT_TRUE(contains(msg, path("overlap.safetensors")));
    EXPECT_TRUE(contains(msg,
                         "tensors 'a' data_offsets [0, 256] and 'b' data_offsets [128, 384] "
                         "overlap"));
    // Containment, listed out of order, is overlap too.
    h = R"({"inner":{"dtype":"U8","shape":[4],"data_offsets":[10,14]},)"
        R"("outer":{"dtype":"U8","shape":[32],"data_offsets":[0,32]}})";
    msg = open_error("contain.safetensors", safetensors_image(h, std::string(32, 0)));
    EXPECT_TRUE(contains(msg, "'outer'"));
    EXPECT_TRUE(contains(msg, "'inner'"));
    EXPECT_TRUE(contains(msg, "overlap"));
}

TEST_F(SafetensorsBadInput, MissingFields) {
    std::string msg =
        open_error("no_offsets.safetensors", one_entry(R"({"dtype":"F32","shape":[4]})"));
    EXPECT_TRUE(contains(msg, path("no_offsets.safetensors") + ": tensor 'w'"));
    EXPECT_TRUE(contains(msg, "missing \"data_offsets\" (expected [begin, end]"));
    msg = open_error("no_dtype.safetensors", one_entry(R"({"shape":[4],"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "tensor 'w': missing \"dtype\""));
    msg = open_error("no_shape.safetensors", one_entry(R"({"dtype":"F32","data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "tensor 'w': missing \"shape\""));
}

TEST_F(SafetensorsBadInput, WrongFieldTypes) {
    struct Case {
        const char* body;
        const char* expect;
    } cases[] = {
        {R"({"dtype":"F32","shape":"4","data_offsets":[0,16]})", "\"shape\" must be an array"},
        {R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})", "found -4"},
        {R"({"dtype":"F32","shape":[4.0],"data_offsets":[0,16]})", "found 4.0"},
        {R"({"dtype":"F32","shape":[1,1,1,1,1,4],"data_offsets":[0,16]})", "6 dimensions"},
        {R"({"dtype":"F32","shape":[4],"data_offsets":[0]})", "found [0]"},
        {R"({"dtype":"F32","shape":[4],"data_offsets":[0,16,32]})", "must be [begin, end]"},
        {R"({"dtype":"F32","shape":[4],"data_offsets":[-1,16]})", "must be [begin, end]"},
        {R"({"dtype":"F32","shape":[4],"data_offsets":{"begin":0}})", "must be [begin, end]"},
    };
    for (const Case& c : cases) {
        std::string msg = open_error("types.safetensors", one_entry(c.body));
        EXPECT_TRUE(contains(msg, path("types.safetensors") + ": tensor 'w'")) << c.body;
        EXPECT_TRUE(contains(msg, c.expect)) << c.body;
    }
}

TEST_F(SafetensorsBadInput, HugeDimensionsDoNotOverflow) {
    struct Case {
        const char* body;
        const char* expect;
    } cases[] = {
        // numel overflows int64, even with a zero dimension after it.
        {R"({"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,0]})",
         "more elements than fit in 64 bits"},
        {R"({"dtype":"U8","shape":[4611686018427387904,4,0],"data_offsets":[0,0]})",
         "more elements than fit in 64 bits"},
        {R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]})", "too large"},
        // numel fits, numel * 8 bytes does not.
        {R"({"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,16]})",
         "needs more than 2^64"},
    };
    for (const Case& c : cases) {
        std::string msg = open_error("dims.safetensors", one_entry(c.body));
        EXPECT_TRUE(contains(msg, "dims.safetensors: tensor 'w'")) << c.body;
        EXPECT_TRUE(contains(msg, c.expect)) << c.body;
    }
}

TEST_F(SafetensorsBadInput, DeeplyNestedValuesDoNotOverflowTheStack) {
    // 300,000 levels of nesting where a shape belongs: the parser and the
    // error message must not recurse that deep.
    const size_t depth = 300'000;
    std::string shape = std::string(depth, '[') + std::string(depth, ']');
    std::string msg =
        open_error("deep.safetensors",
                   one_entry(R"({"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "deep.safetensors: tensor 'w'"));
    EXPECT_TRUE(contains(msg, "found [[[[[...]]]]"));
    EXPECT_LT(msg.size(), 400u);
    // Long strings are cut in messages too.
    msg = open_error("long.safetensors", one_entry(R"({"dtype":")" + std::string(100000, 'Q') +
                                                   R"(","shape":[4],"data_offsets":[0,16]})"));
    EXPECT_TRUE(contains(msg, "unknown dtype \"QQQQ"));
    EXPECT_LT(msg.size(), 400u);
}

TEST_F(SafetensorsBadInput, BadMetadata) {
    std::string msg =
        open_error("meta.safetensors", safetensors_image(R"({"__metadata__":{"format":1}})", ""));
    EXPECT_TRUE(contains(msg, path("meta.safetensors")));
    EXPECT_TRUE(contains(msg, "__metadata__ key 'format' must map to a string, found 1"));
    msg = open_error("meta2.safetensors", safetensors_image(R"({"__metadata__":["pt"]})", ""));
    EXPECT_TRUE(contains(msg, "__metadata__ must be an object of strings"));
}

TEST_F(SafetensorsBadInput, DuplicateTensorName) {
    std::string h = R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                    R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})";
    std::string msg = open_error("dup.safetensors", safetensors_image(h, std::string(8, 0)));
    EXPECT_TRUE(contains(msg, path("dup.safetensors")));
    EXPECT_TRUE(contains(msg, "tensor 'w' appears twice"));
}

TEST_F(SafetensorsBadInput, MissingFileAndDirectory) {
    std::string msg = error_of([&] { SafetensorsFile::open(path("absent.safetensors")); });
    EXPECT_TRUE(contains(msg, path("absent.safetensors")));
    EXPECT_TRUE(contains(msg, "No such file or directory"));
    msg = error_of([&] { SafetensorsFile::open(dir_); });
    EXPECT_TRUE(contains(msg, dir_));
    EXPECT_TRUE(contains(msg, "is a directory"));
}

TEST_F(SafetensorsBadInput, BatchMissingKey) {
    std::string h = R"({"attention_mask":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]},)"
                    R"("input_ids":{"dtype":"I64","shape":[1,2],"data_offsets":[16,32]}})";
    std::string p = write_bytes("batch.safetensors", safetensors_image(h, std::string(32, 0)));
    Batch b = load_batch(p);
    std::string msg = error_of([&] { b.require("labels"); });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg, "missing key 'labels'"));
    EXPECT_TRUE(contains(msg, "keys present: 'attention_mask', 'input_ids'"));
    EXPECT_FALSE(b.find("labels").has_value());
}

TEST_F(SafetensorsBadInput, BatchWithFloatTensor) {
    std::string h = R"({"labels":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::string p = write_bytes("fbatch.safetensors", safetensors_image(h, std::string(8, 0)));
    std::string msg = error_of([&] { load_batch(p); });
    EXPECT_TRUE(contains(msg, p));
    EXPECT_TRUE(contains(msg, "tensor 'labels' is F32 [2], expected integer ids"));
}

}  // namespace
}  // namespace loom
