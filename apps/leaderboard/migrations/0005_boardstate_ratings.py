from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0004_entry_state'),
    ]

    operations = [
        migrations.AddField(
            model_name='boardstate',
            name='ratings',
            field=models.BigIntegerField(default=0),
        ),
    ]
