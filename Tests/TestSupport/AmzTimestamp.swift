import Foundation

/// `20150830T123600Z` as a date.
package func amzTimestamp(_ text: String) -> Date {
    var fields = tm()
    let digits = Array(text)
    func number(_ range: Range<Int>) -> Int32 { Int32(String(digits[range]))! }
    fields.tm_year = number(0..<4) - 1900
    fields.tm_mon = number(4..<6) - 1
    fields.tm_mday = number(6..<8)
    fields.tm_hour = number(9..<11)
    fields.tm_min = number(11..<13)
    fields.tm_sec = number(13..<15)
    return Date(timeIntervalSince1970: TimeInterval(timegm(&fields)))
}
