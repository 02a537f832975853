#!/usr/bin/env python3
"""Writes the xclbin (AXLF) test fixture and fuzz seeds, field by field at the offsets of XRT's
src/runtime_src/core/include/xrt/detail/xclbin.h (struct axlf, axlf_header,
axlf_section_header, ip_layout/ip_data, aie_partition, aie_pdi, cdo_group). This is a second
hand layout, independent of the engine's writer; tests/npu/test_xclbin.cpp lays out the same
file in C++ and checks the two agree byte for byte. Standard library only.

    python3 scripts/make_xclbin_fixtures.py
writes tests/fixtures/xclbin/hand_laid.xclbin and tests/fuzz/corpus/xclbin/*.
"""
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
XML = b'<project name="t"></project>'
TABLE, META, IPS, PART, CUSTOM, LENGTH = 456, 616, 704, 872, 1296, 1300
KERNEL_ID = 0x901


def put(buf, at, fmt, *values):
    struct.pack_into("<" + fmt, buf, at, *values)


def axlf_header(f, length, num_sections):
    put(f, 0, "8s", b"xclbin2\0")
    put(f, 8, "i", -1)                      # m_signature_length
    f[12:296] = b"\xff" * 284               # reserved[28], m_keyBlock[256]
    put(f, 296, "Q", 0x1122334455667788)    # m_uniqueId
    put(f, 304, "Q", length)                # m_header.m_length
    put(f, 312, "Q", 1700000000)            # m_timeStamp
    put(f, 330, "BB", 2, 1)                 # m_versionMajor, m_versionMinor
    f[416:432] = bytes(range(0x10, 0x20))   # uuid
    put(f, 448, "I", num_sections)          # m_numSections


def section(f, i, kind, name, offset, size):
    at = TABLE + 40 * i                     # kind u32, name[16], pad, offset u64, size u64
    put(f, at, "I16s", kind, name)
    put(f, at + 24, "QQ", offset, size)


def ip(f, at, kind, props, base, name):
    put(f, at, "IIQ64s", kind, props, base, name)


def hand_laid():
    f = bytearray(LENGTH)
    axlf_header(f, LENGTH, 4)
    section(f, 0, 2, b"meta", META, len(XML))
    section(f, 1, 8, b"ips", IPS, 8 + 2 * 80)
    section(f, 2, 32, b"partition", PART, 424)
    section(f, 3, 99, b"custom", CUSTOM, 4)
    f[META:META + len(XML)] = XML
    put(f, IPS, "i", 2)
    ip(f, IPS + 8, 7, (KERNEL_ID << 16) | (1 << 4) | 1, 0, b"MLIR_AIE:MLIRAIE")
    ip(f, IPS + 88, 1, 0, 0x1000, b"other:inst")
    p = PART
    put(f, p + 4, "II", 184, 2048)          # mpo_name, operations_per_cycle
    put(f, p + 16, "QQ", 0xAABB, 0xCCDD)    # fingerprints
    put(f, p + 32, "H", 4)                  # info.column_width
    put(f, p + 40, "II", 2, 192)            # info.start_columns
    put(f, p + 120, "II", 1, 200)           # aie_pdi
    put(f, p + 184, "5s", b"part\0")
    put(f, p + 192, "HH", 1, 5)
    f[p + 200:p + 216] = bytes(range(0xA0, 0xB0))
    put(f, p + 216, "IIII", 8, 416, 1, 296)  # pdi_image, cdo_groups
    put(f, p + 296, "IB", 400, 1)           # cdo_group mpo_name, cdo_type
    put(f, p + 304, "QII", 7, 1, 408)       # pdi_id, dpu_kernel_ids
    put(f, p + 400, "4s", b"DPU\0")
    put(f, p + 408, "Q", KERNEL_ID)
    f[p + 416:p + 424] = bytes(range(0xD0, 0xD8))
    f[CUSTOM:CUSTOM + 4] = b"abcd"
    return bytes(f)


def header_only():
    f = bytearray(TABLE)
    axlf_header(f, TABLE, 0)
    return bytes(f)


def ip_layout_only():
    f = bytearray(TABLE + 40 + 8 + 80)
    axlf_header(f, len(f), 1)
    section(f, 0, 8, b"", TABLE + 40, 88)
    put(f, TABLE + 40, "i", 1)
    ip(f, TABLE + 48, 7, (0x902 << 16) | 1, 0, b"k:cu")
    return bytes(f)


def main():
    fixtures = os.path.join(ROOT, "tests", "fixtures", "xclbin")
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", "xclbin")
    os.makedirs(fixtures, exist_ok=True)
    os.makedirs(corpus, exist_ok=True)
    files = {os.path.join(fixtures, "hand_laid.xclbin"): hand_laid(),
             os.path.join(corpus, "hand_laid.xclbin"): hand_laid(),
             os.path.join(corpus, "header_only.xclbin"): header_only(),
             os.path.join(corpus, "ip_layout_only.xclbin"): ip_layout_only()}
    for path, data in files.items():
        with open(path, "wb") as out:
            out.write(data)
        print(f"{os.path.relpath(path, ROOT)}: {len(data)} bytes")


if __name__ == "__main__":
    main()
