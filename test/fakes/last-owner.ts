/**
 * The fakes' form of the rule the SQL stores keep in their write (putMember, setMemberRole and
 * removeMember with `keepOwner`): whether `email` stopping being an owner of `accountId` (demoted or
 * removed) would leave it with none, among `members`.
 */
export function losesLastOwner(members: ReadonlyArray<{ accountId: string; email: string; role: string }>, accountId: string, email: string): boolean {
  const owners = members.filter((m) => m.accountId === accountId && m.role === 'owner');
  return owners.length === 1 && owners[0]!.email === email;
}
