import DBus
import Testing

/// The text of an AddMatch rule: what dbus-daemon parses.
@Suite struct MatchRuleTests {
    @Test func fieldsAreQuotedInOrder() {
        let rule = MatchRule(sender: "org.bluez", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        #expect(rule.description == "type='signal',sender='org.bluez',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'")
    }

    /// dbus-daemon's rule syntax has no escape inside quotes: a quote in a
    /// value closes the quotes, adds an escaped quote and opens them again.
    @Test func aQuoteInAValueIsClosedEscapedAndReopened() {
        #expect(MatchRule(arg0: "it's").description == #"type='signal',arg0='it'\''s'"#)
        #expect(MatchRule(arg0: "''").description == #"type='signal',arg0=''\'''\'''"#)
    }

    @Test func otherTextIsKeptAsItIs() {
        #expect(MatchRule(arg0: "naïve, \\ \"x\" é").description == "type='signal',arg0='naïve, \\ \"x\" é'")
    }
}
