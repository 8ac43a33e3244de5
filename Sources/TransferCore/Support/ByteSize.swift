import Foundation

/// Sizes with binary suffixes: `1024`, `500K`, `10M`, `1.5G` (K = 1024).
public enum ByteSize {
    public static func parse(_ text: String) -> Int64? {
        var digits = text.trimmingCharacters(in: .whitespaces).uppercased()
        if digits.hasSuffix("IB") { digits.removeLast(2) } else if digits.hasSuffix("B") { digits.removeLast() }
        let multipliers: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824, "T": 1_099_511_627_776]
        var multiplier: Double = 1
        if let last = digits.last, let factor = multipliers[last] {
            multiplier = factor
            digits.removeLast()
        }
        guard let number = Double(digits), number >= 0 else { return nil }
        return Int64(number * multiplier)
    }
}
