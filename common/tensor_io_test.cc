#include "common/tensor_io.h"

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mxval {
namespace {

HostTensor Sample(DType d, std::vector<int64_t> shape) {
  HostTensor t = HostTensor::Zeros(d, std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<uint8_t>(i * 37 + 11);
  return t;
}

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  for (DType d : {DType::kU8, DType::kI8, DType::kU16, DType::kF16, DType::kF32, DType::kF64}) {
    for (auto shape : std::vector<std::vector<int64_t>>{{7}, {2, 3, 4}, {0, 5}, {}}) {
      HostTensor t = Sample(d, shape);
      auto back = ParseNpy(SerializeNpy(t));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->dtype, d);
      EXPECT_EQ(back->shape, t.shape);
      EXPECT_EQ(back->data, t.data);
    }
  }
  // Header is padded so the data starts 64-byte aligned.
  const std::string bytes = SerializeNpy(Sample(DType::kF32, {3}));
  EXPECT_EQ((bytes.size() - 12) % 64, 0u);
}

TEST(Npy, ReadsNumpyWrittenFile) {
  // Bytes as numpy 1.x writes np.arange(6, dtype='<f4').reshape(2, 3).
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  for (int i = 0; i < 6; ++i) {
    float f = static_cast<float>(i);
    bytes.append(reinterpret_cast<const char*>(&f), 4);
  }
  auto t = ParseNpy(bytes);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->as<float>()[5], 5.0f);
}

TEST(Npy, EveryTruncationIsACleanError) {
  const std::string good = SerializeNpy(Sample(DType::kF32, {4, 4}));
  for (size_t n = 0; n < good.size(); ++n) {
    auto t = ParseNpy(good.substr(0, n));
    ASSERT_FALSE(t.ok()) << "prefix " << n;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(Npy, RejectsCorruptHeaders) {
  std::string good = SerializeNpy(Sample(DType::kF32, {4}));
  auto mutate = [&](const std::string& from, const std::string& to) {
    std::string b = good;
    b.replace(b.find(from), from.size(), to);
    return ParseNpy(b);
  };
  EXPECT_FALSE(mutate("<f4", ">f4").ok());   // big-endian
  EXPECT_FALSE(mutate("False", "True ").ok());  // Fortran order
  EXPECT_FALSE(mutate("(4,)", "(-4,)").ok());
  EXPECT_FALSE(mutate("(4,)", "(99999999999999,)").ok());  // promises more than the file
  EXPECT_FALSE(mutate("(4,)", "(4x,)").ok());
  EXPECT_FALSE(mutate("NUMPY", "NUMPX").ok());
  std::mt19937 rng(1);
  for (int i = 0; i < 5000; ++i) {  // random byte flips never crash
    std::string b = good;
    b[rng() % b.size()] = static_cast<char>(rng());
    (void)ParseNpy(b);
  }
}

std::string MakeSafetensors(const nlohmann::json& header, const std::string& data) {
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
  return out + h + data;
}

TEST(Safetensors, ReadsNamedTensors) {
  std::string data(2 * 3 + 4 * 2, '\0');
  for (int i = 0; i < 6; ++i) data[i] = static_cast<char>(i + 1);
  const float f[2] = {1.5f, -2.0f};
  std::memcpy(&data[6], f, 8);
  nlohmann::json h = {{"__metadata__", {{"format", "pt"}}},
                      {"w_kc", {{"dtype", "U8"}, {"shape", {2, 3}}, {"data_offsets", {0, 6}}}},
                      {"scale", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {6, 14}}}}};
  const std::string file = MakeSafetensors(h, data);
  auto names = ListSafetensors(file);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 2u);
  auto w = ParseSafetensors(file, "w_kc");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->as<uint8_t>()[5], 6);
  auto s = ParseSafetensors(file, "scale");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->as<float>()[1], -2.0f);
  auto missing = ParseSafetensors(file, "w_vc");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("w_kc"), std::string::npos);
  for (size_t n = 0; n < file.size(); ++n) EXPECT_FALSE(ParseSafetensors(file.substr(0, n), "scale").ok()) << n;
}

TEST(Safetensors, RejectsInconsistentEntries) {
  const std::string data(16, '\0');
  auto parse = [&](nlohmann::json entry) { return ParseSafetensors(MakeSafetensors({{"t", entry}}, data), "t"); };
  EXPECT_FALSE(parse({{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {0, 5}}}).ok());   // size mismatch
  EXPECT_FALSE(parse({{"dtype", "U8"}, {"shape", {32}}, {"data_offsets", {0, 32}}}).ok()); // past end
  EXPECT_FALSE(parse({{"dtype", "Q4"}, {"shape", {4}}, {"data_offsets", {0, 4}}}).ok());
  EXPECT_FALSE(parse({{"dtype", "U8"}, {"shape", {-4}}, {"data_offsets", {0, 4}}}).ok());
  EXPECT_FALSE(parse({{"dtype", "U8"}, {"shape", "4"}, {"data_offsets", {0, 4}}}).ok());
  EXPECT_FALSE(parse({{"dtype", "U8"}, {"shape", {4}}, {"data_offsets", {4, 0}}}).ok());
  EXPECT_FALSE(ParseSafetensors(std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10), "t").ok());
  EXPECT_FALSE(ParseSafetensors(MakeSafetensors(nlohmann::json::array(), ""), "t").ok());
}

TEST(TensorFiles, SaveAndLoadFromDisk) {
  const std::string path = ::testing::TempDir() + "/t_" + std::to_string(getpid()) + ".npy";
  HostTensor t = Sample(DType::kU16, {3, 5});
  ASSERT_TRUE(SaveNpy(path, t).ok());
  auto back = LoadTensor(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data, t.data);
  EXPECT_EQ(LoadTensor(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(Safetensors, RejectsOverlappingAndMisplacedOffsets) {
  const std::string data(16, '\0');
  auto u8 = [](uint64_t b, uint64_t e) {
    return nlohmann::json{{"dtype", "U8"}, {"shape", {e - b}}, {"data_offsets", {b, e}}};
  };
  // Two tensors sharing bytes [4, 8): refused whatever tensor is asked for.
  const std::string overlap = MakeSafetensors({{"a", u8(0, 8)}, {"b", u8(4, 12)}}, data);
  for (const char* name : {"a", "b"}) {
    auto t = ParseSafetensors(overlap, name);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(t.status().message().find("overlap"), std::string::npos) << t.status();
  }
  EXPECT_FALSE(ListSafetensors(overlap).ok());
  EXPECT_FALSE(ParseSafetensors(MakeSafetensors({{"a", u8(0, 8)}, {"b", u8(0, 8)}}, data), "a").ok());  // aliases
  // A bad entry elsewhere in the file refuses the file.
  auto elsewhere = ParseSafetensors(MakeSafetensors({{"a", u8(0, 4)}, {"b", u8(4, 20)}}, data), "a");
  EXPECT_NE(elsewhere.status().message().find("'b' runs past the end"), std::string::npos) << elsewhere.status();
  // Adjacent spans, empty tensors and entries of dtypes we do not load are fine.
  nlohmann::json ok = {{"a", u8(0, 4)}, {"b", u8(4, 12)}, {"e", u8(12, 12)},
                       {"i", {{"dtype", "I64"}, {"shape", {0}}, {"data_offsets", {12, 12}}}},
                       {"k", {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {12, 16}}}}};
  auto b = ParseSafetensors(MakeSafetensors(ok, data), "b");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape, std::vector<int64_t>{8});
  EXPECT_FALSE(ParseSafetensors(MakeSafetensors(ok, data), "k").ok());  // I32 is not a dtype we load
  // A known dtype whose shape disagrees with its byte range.
  ok["k"]["shape"] = {2};
  EXPECT_NE(ParseSafetensors(MakeSafetensors(ok, data), "b").status().message().find("'k': data_offsets span 4"),
            std::string::npos);
}

std::string TmpPath(const std::string& name) { return ::testing::TempDir() + "/tio_" + std::to_string(getpid()) + "_" + name; }

TEST(TensorFiles, DevicesAreRefusedBeforeReading) {
  for (const std::string name : {"z.npy", "z.safetensors"}) {
    const std::string link = TmpPath(name);
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink("/dev/zero", link.c_str()), 0);
    auto t = LoadTensor(link + (name == "z.npy" ? "" : "#w"));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("character device"), std::string::npos) << t.status();
  }
}

TEST(TensorFiles, HeaderSizesAreCheckedAgainstTheFileAndTheCap) {
  const std::string path = TmpPath("big.npy");
  HostTensor t = Sample(DType::kF32, {64, 32});
  ASSERT_TRUE(SaveNpy(path, t).ok());
  auto capped = LoadTensor(path, /*max_bytes=*/4096);
  EXPECT_EQ(capped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(capped.status().message().find("needs 8192 bytes, over the cap of 4 KiB"), std::string::npos) << capped.status();
  EXPECT_TRUE(LoadTensor(path, 8192).ok());
  // A header promising 2^36 bytes in a small file: refused without allocating them.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (131072, 131072), }\n";
  std::string liar("\x93NUMPY\x01\x00", 8);
  liar += static_cast<char>(header.size() & 0xFF);
  liar += static_cast<char>(header.size() >> 8);
  liar += header + std::string(64, '\0');
  std::ofstream(TmpPath("liar.npy"), std::ios::binary) << liar;
  auto lie = LoadTensor(TmpPath("liar.npy"));
  EXPECT_EQ(lie.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lie.status().message().find("[131072, 131072] is larger than 8 GiB"), std::string::npos) << lie.status();
  header.replace(header.find("131072, 131072"), 14, "1024, 1024    ");
  liar.replace(10, header.size(), header);
  std::ofstream(TmpPath("liar.npy"), std::ios::binary) << liar;
  lie = LoadTensor(TmpPath("liar.npy"));
  EXPECT_NE(lie.status().message().find("header promises 4194304 bytes, file has 64"), std::string::npos) << lie.status();
  // Safetensors: a header length past the file, and a tensor over the cap.
  std::ofstream(TmpPath("hdr.safetensors"), std::ios::binary) << std::string("\x00\x00\x00\x01\x00\x00\x00\x00{}", 10);
  auto hdr = LoadTensor(TmpPath("hdr.safetensors") + "#w");
  EXPECT_NE(hdr.status().message().find("header length"), std::string::npos) << hdr.status();
  const std::string data(64, '\x07');
  std::ofstream(TmpPath("w.safetensors"), std::ios::binary)
      << MakeSafetensors({{"w", {{"dtype", "U8"}, {"shape", {8, 8}}, {"data_offsets", {0, 64}}}}}, data);
  auto w = LoadTensor(TmpPath("w.safetensors"));  // the only tensor: no name needed
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->as<uint8_t>()[63], 7);
  auto wcap = LoadTensor(TmpPath("w.safetensors") + "#w", 32);
  EXPECT_NE(wcap.status().message().find("tensor 'w' [8, 8] needs 64 bytes, over the cap of 32 bytes"), std::string::npos)
      << wcap.status();
}

TEST(TensorFiles, Bf16AndHalfConvert) {
  HostTensor t = HostTensor::Zeros(DType::kBF16, {2});
  t.as<uint16_t>()[0] = 0x3FC0;  // 1.5
  t.as<uint16_t>()[1] = 0xC000;  // -2
  auto f = ToFloat32(t);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->as<float>()[0], 1.5f);
  EXPECT_EQ(f->as<float>()[1], -2.0f);
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_FALSE(ToFloat32(HostTensor::Zeros(DType::kU8, {1})).ok());
}

}  // namespace
}  // namespace mxval
