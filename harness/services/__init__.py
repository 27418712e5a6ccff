"""What a test stands up beside the code under test: servers, processes, accounts.

- A real etcd of either release, over TLS or with users (:mod:`.etcd`, :mod:`.tls`), and
  the etcd-v3 launcher as torchrun builds it (:mod:`.etcd_v3`); the nemesis between them,
  which loses answers, delivers writes late and cuts a member from its peers
  (:mod:`.nemesis`).
- A private Slurm cluster (:mod:`.slurm`) and a fake one (:mod:`.fakeslurm`); the
  Debian packages under them (:mod:`.debian`).
- A hung or slow FUSE mount (:mod:`.fuse`), the stat helpers beside it
  (:mod:`.stathelpers`).
- Another account (:mod:`.accounts`), processes around a pid file (:mod:`.pidfiles`), a
  producer's badly timed signals (:mod:`.stopsignals`).

Rules: a service starts and stops its own processes, by PID, and runs no whole job. It
uses only the basics and the programs; the session and the jobs use it. A new fake or
real server gets a module here.
"""
