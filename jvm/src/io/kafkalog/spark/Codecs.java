package io.kafkalog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

/** Kafka's codecs (kafkalog/codecs.py), from the jars Spark ships. */
final class Codecs {
    static final int NONE = 0;
    static final int GZIP = 1;
    static final int SNAPPY = 2;
    static final int LZ4 = 3;
    static final int ZSTD = 4;

    private Codecs() {
    }

    /** Decompress {@code data[0, length)} into {@code out} (grown when short); returns the
     *  buffer holding the result and sets {@code size[0]} to its length in bytes. */
    static byte[] decompress(int codec, byte[] data, int length, byte[] out, int[] size)
            throws IOException {
        InputStream raw = new ByteArrayInputStream(data, 0, length);
        InputStream in;
        switch (codec) {
            case GZIP:
                in = new GZIPInputStream(raw, 16384);
                break;
            case SNAPPY:
                // xerial's stream reads its own framing (what Kafka's Java clients write) and
                // falls back to one raw block without the \x82SNAPPY\0 header
                in = new SnappyInputStream(raw);
                break;
            case LZ4:
                in = new LZ4FrameInputStream(raw);
                break;
            case ZSTD:
                in = new ZstdInputStreamNoFinalizer(raw);
                break;
            default:
                throw new IOException("unknown compression codec " + codec);
        }
        try (InputStream s = in) {
            int n = 0;
            while (true) {
                if (n == out.length) {
                    out = Arrays.copyOf(out, Math.max(out.length * 2, 65536));
                }
                int r = s.read(out, n, out.length - n);
                if (r < 0) {
                    break;
                }
                n += r;
            }
            size[0] = n;
            return out;
        }
    }
}
