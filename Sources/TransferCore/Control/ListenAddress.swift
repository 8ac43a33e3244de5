import Foundation

/// Where `--listen` serves: an IP address (v4, or v6 in brackets) and a port.
/// `localhost` means 127.0.0.1; port 0 lets the system choose (the run prints it).
package struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    package var host: String
    package var port: Int
    package var isIPv6: Bool

    /// Parses `HOST:PORT`; throws with the reason and an example.
    package init(parsing text: String) throws {
        func refuse(_ why: String) -> ListenAddressError {
            ListenAddressError(description: "--listen \(text): \(why); write it as 127.0.0.1:8080 or [::1]:8080")
        }
        var hostPart: Substring
        let portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw refuse("an IPv6 address needs its port after the closing bracket")
            }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw refuse("the port is missing") }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        guard let port = Int(portPart), (0...65535).contains(port) else { throw refuse("'\(portPart)' is not a port number") }
        if hostPart == "localhost" { hostPart = "127.0.0.1" }
        guard !hostPart.isEmpty else { throw refuse("the address is missing (0.0.0.0 serves every interface)") }
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, String(hostPart), &v4) == 1 {
            isIPv6 = false
        } else if inet_pton(AF_INET6, String(hostPart), &v6) == 1 {
            isIPv6 = true
        } else {
            throw refuse("'\(hostPart)' is not an IP address")
        }
        host = String(hostPart)
        self.port = port
    }

    /// 127.0.0.0/8 or ::1: only this machine can connect.
    package var isLoopback: Bool {
        if isIPv6 { return host == "::1" || host == "0:0:0:0:0:0:0:1" }
        return host.split(separator: ".").first == "127"
    }

    package var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The base URL a client on this machine uses (with the port actually bound).
    package func url(port: Int) -> String { isIPv6 ? "http://[\(host)]:\(port)" : "http://\(host):\(port)" }
}

package struct ListenAddressError: Error, CustomStringConvertible {
    package let description: String
}
