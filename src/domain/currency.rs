use std::fmt;

/// Active ISO 4217 alphabetic codes (list of 2025, after ANG→XCG, SLL→SLE,
/// ZWL→ZWG) that have a minor unit, sorted so lookup is a binary search.
/// Left out: the codes whose minor unit ISO 4217 gives as "N.A.", since an
/// amount in minor units means nothing for them: `XTS` (testing), `XXX` (no
/// currency), the precious metals (`XAG`, `XAU`, `XPD`, `XPT`), the units of
/// account (`XBA`, `XBB`, `XBC`, `XBD`, `XDR`, `XSU`, `XUA`).
const ACTIVE_CODES: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BHD",
    "BIF", "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF",
    "CHE", "CHF", "CHW", "CLF", "CLP", "CNY", "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DJF",
    "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP",
    "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR",
    "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT",
    "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR",
    "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB",
    "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN",
    "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH",
    "UGX", "USD", "USN", "UYI", "UYU", "UYW", "UZS", "VED", "VES", "VND", "VUV", "WST", "XAF",
    "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
];

/// An active ISO 4217 alphabetic currency code, upper case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency(&'static str);

impl Currency {
    /// Accepts an active code in upper case (`usd` is rejected, not folded:
    /// the spec asks for upper case and a silent fix would hide client bugs).
    pub fn parse(raw: &str) -> Result<Self, String> {
        ACTIVE_CODES
            .binary_search(&raw)
            .map(|i| Self(ACTIVE_CODES[i]))
            .map_err(|_| "must be an active ISO 4217 code in upper case, such as USD".to_owned())
    }

    /// The three-letter code.
    pub fn code(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_unique() {
        assert!(ACTIVE_CODES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn active_codes_parse_and_others_do_not() {
        for good in [
            "USD", "EUR", "JPY", "XCG", "SLE", "XAF", "XOF", "XPF", "XCD",
        ] {
            assert_eq!(Currency::parse(good).unwrap().code(), good);
        }
        for bad in [
            "usd", "US", "USDD", "", "XXX", "XTS", "HRK", "ANG", "ABC", "XAU", "XAG", "XPT", "XPD",
            "XDR", "XBA", "XBB", "XBC", "XBD", "XSU", "XUA",
        ] {
            assert!(Currency::parse(bad).is_err(), "{bad}");
        }
    }
}
