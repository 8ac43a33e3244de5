import CCurl

/// Classifies libcurl's result codes for the retry policy.
enum CurlErrorMapping {
    static func kind(of code: CURLcode) -> TransportError.Kind {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .dns
        case CURLE_COULDNT_CONNECT:
            return .connect
        case CURLE_OPERATION_TIMEDOUT:
            return .timeout
        case CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_HTTP2, CURLE_HTTP2_STREAM:
            return .reset
        case CURLE_PARTIAL_FILE:
            return .truncated
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_ISSUER_ERROR, CURLE_SSL_CRL_BADFILE:
            return .tls
        case CURLE_TOO_MANY_REDIRECTS:
            return .tooManyRedirects
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        case CURLE_WEIRD_SERVER_REPLY, CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
            return .protocolError
        default:
            return .other
        }
    }
}
