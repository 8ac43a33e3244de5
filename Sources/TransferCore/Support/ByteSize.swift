import Foundation

/// Sizes with binary suffixes: `1024`, `500K`, `10M`, `1.5G` (K = 1024).
package enum ByteSize {
    /// The largest size accepted: 2^60 bytes (1 EiB). Anything above is a
    /// typo or an attack, and `Int64(Double)` traps past `Int64.max`.
    package static let maximum: Int64 = 1 << 60

    /// The size in bytes, or nil for text that is not a finite size from 0 to `maximum`.
    package static func parse(_ text: String) -> Int64? {
        var digits = text.trimmingCharacters(in: .whitespaces).uppercased()
        if digits.hasSuffix("IB") { digits.removeLast(2) } else if digits.hasSuffix("B") { digits.removeLast() }
        let multipliers: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824, "T": 1_099_511_627_776]
        var multiplier: Double = 1
        if let last = digits.last, let factor = multipliers[last] {
            multiplier = factor
            digits.removeLast()
        }
        // Only decimal digits, one point and an exponent: Double(String) also reads
        // "inf", "nan" and hexadecimal floats, which are no sizes.
        guard !digits.isEmpty, digits.utf8.allSatisfy({ (0x30...0x39).contains($0) || $0 == 0x2E || $0 == 0x45 || $0 == 0x2B || $0 == 0x2D }),
              let number = Double(digits), number.isFinite, number >= 0 else { return nil }
        let bytes = number * multiplier
        guard bytes.isFinite, bytes <= Double(maximum) else { return nil }
        return Int64(bytes)
    }
}
