/**
 * Which IP addresses count as public unicast. ipaddr.js names the special
 * ranges; the forms that carry an IPv4 address inside an IPv6 one are judged
 * by that IPv4 address, since traffic to them ends up there.
 */
import ipaddr from "ipaddr.js"
import * as Net from "node:net"

export type Address = ipaddr.IPv4 | ipaddr.IPv6

const nat64 = ipaddr.IPv6.parseCIDR("64:ff9b::/96")
const ipv4Compatible = ipaddr.IPv6.parseCIDR("::/96")
/** Everything IANA allocates for global IPv6 unicast; the rest is reserved or special. */
const globalUnicast = ipaddr.IPv6.parseCIDR("2000::/3")

/** A URL hostname without the brackets of an IPv6 literal. */
export const unbracket = (host: string): string => host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host

/** The address a string names, when it is an IP literal (IPv6 with or without brackets). */
export const parseLiteral = (host: string): Address | undefined => {
  const bare = unbracket(host)
  // net.isIP only takes canonical forms; other IPv4 notations are normalized by URL parsing before this,
  // and anything left over goes to the resolver, whose answers are checked in turn.
  return Net.isIP(bare) === 0 ? undefined : ipaddr.parse(bare)
}

const ipv4At = (parts: ReadonlyArray<number>, index: number, invert = false): ipaddr.IPv4 => {
  const high = invert ? ~parts[index]! & 0xffff : parts[index]!
  const low = invert ? ~parts[index + 1]! & 0xffff : parts[index + 1]!
  return new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff])
}

/** The IPv4 addresses an IPv6 address carries and the name of that form, or undefined when it is not such a form. */
const embeddedIPv4 = (
  address: ipaddr.IPv6,
  range: string
): { readonly form: string; readonly inner: ReadonlyArray<ipaddr.IPv4> } | undefined => {
  const parts = address.parts
  switch (range) {
    case "ipv4Mapped": // ::ffff:a.b.c.d
    case "rfc6145": // ::ffff:0:a.b.c.d
      return { form: range, inner: [ipv4At(parts, 6)] }
    case "6to4": // 2002:aabb:ccdd::/48
      return { form: range, inner: [ipv4At(parts, 1)] }
    case "teredo": // 2001:0:server:...:~client; both ends must be public
      return { form: range, inner: [ipv4At(parts, 2), ipv4At(parts, 6, true)] }
  }
  if (address.match(nat64)) return { form: "nat64", inner: [ipv4At(parts, 6)] }
  // :: and ::1 are judged as themselves (unspecified, loopback).
  if (range === "unicast" && address.match(ipv4Compatible)) return { form: "ipv4Compatible", inner: [ipv4At(parts, 6)] }
  return undefined
}

/** Why an address is not public unicast (its ipaddr.js range, or the form and the range of what it embeds), or undefined when it is. */
export const refusal = (address: Address): string | undefined => {
  if (address instanceof ipaddr.IPv4) {
    const range = address.range()
    return range === "unicast" ? undefined : range
  }
  // A zone only means something on a local link.
  if (address.zoneId !== undefined) return "linkLocal"
  const range = address.range()
  const embedded = embeddedIPv4(address, range)
  if (embedded !== undefined) {
    for (const inner of embedded.inner) {
      const why = refusal(inner)
      if (why !== undefined) return `${embedded.form} form of ${inner.toString()}, ${why}`
    }
    return undefined
  }
  // Includes 64:ff9b:1::/48 (rfc6052, local-use NAT64), where the IPv4 part has no fixed place.
  if (range !== "unicast") return range
  if (!address.match(globalUnicast)) return "notGlobalUnicast"
  return undefined
}

/** A name that always means this machine (RFC 6761), refused without asking DNS. */
export const isLocalhostName = (hostname: string): boolean => {
  const name = hostname.toLowerCase().replace(/\.$/, "")
  return name === "localhost" || name.endsWith(".localhost")
}
